// The real file system: POSIX calls with EINTR retried, short reads and writes continued,
// and errno mapped to `FileIOError`. fdatasync and fsync are never retried (contract 2 of
// FileSystem.swift): after a failed sync the kernel may have dropped the dirty pages, so a
// second call that "succeeds" proves nothing.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CStrataPlatform
import StrataLocks

// The C library's calls under names of their own: this file's types have methods called
// `open`, `close` and `rename`, and the module that holds the C calls differs by platform.
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 { open(path, flags, mode) }
private func systemClose(_ descriptor: Int32) -> Int32 { close(descriptor) }
private func systemRename(_ source: String, _ destination: String) -> Int32 { rename(source, destination) }

/// The operating system's file system.
public struct POSIXFileSystem: FileSystem {
    public init() {}

    public func open(_ path: String, options: FileOpenOptions) throws -> any OpenFile {
        var flags = O_CLOEXEC
        flags |= options.contains(.write) || options.contains(.create) ? O_RDWR : O_RDONLY
        if options.contains(.create) { flags |= O_CREAT }
        if options.contains(.exclusive) { flags |= O_EXCL }
        if options.contains(.truncate) { flags |= O_TRUNC }
        let fd = try retryingInterrupts(.open, path) { systemOpen(path, flags, 0o644) }
        return POSIXOpenFile(fd: fd, path: path)
    }

    public func rename(_ source: String, to destination: String) throws {
        _ = try retryingInterrupts(.rename, source) { systemRename(source, destination) }
    }

    public func removeFile(_ path: String) throws {
        _ = try retryingInterrupts(.remove, path) { unlink(path) }
    }

    public func createDirectory(_ path: String) throws {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/") {
            prefix += component
            if mkdir(prefix, 0o755) != 0 && errno != EEXIST {
                throw FileIOError(errno: errno, operation: .createDirectory, path: prefix)
            }
            prefix += "/"
        }
    }

    public func syncDirectory(_ path: String) throws {
        let fd = try retryingInterrupts(.syncDirectory, path) { systemOpen(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { _ = systemClose(fd) }
        if cplatform_sync_full(fd) != 0 { throw FileIOError(errno: errno, operation: .syncDirectory, path: path) }
    }

    public func contentsOfDirectory(_ path: String) throws -> [String] {
        guard let directory = opendir(path) else {
            throw FileIOError(errno: errno, operation: .list, path: path)
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    public func fileExists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    public func lockExclusively(_ path: String) throws -> any FileLock {
        let fd = try retryingInterrupts(.open, path) { systemOpen(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644) }
        // flock locks belong to the open file description, so a second open of the same
        // path in this process is refused as well.
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            _ = systemClose(fd)
            throw FileIOError(errno: code, operation: .lock, path: path)
        }
        return POSIXFileLock(fd: fd, path: path)
    }

    public func lockShared(_ path: String) throws -> any FileLock {
        let fd = try retryingInterrupts(.open, path) { systemOpen(path, O_RDONLY | O_CLOEXEC, 0) }
        if flock(fd, LOCK_SH | LOCK_NB) != 0 {
            let code = errno
            _ = systemClose(fd)
            throw FileIOError(errno: code, operation: .lock, path: path)
        }
        return POSIXFileLock(fd: fd, path: path)
    }

    public func openShared(_ path: String, byteCount: Int) throws -> any SharedFile {
        // Not through a symbolic link: a link planted in its place would have this call
        // extend and lay out whatever file it names.
        let fd = try retryingInterrupts(.open, path) { systemOpen(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644) }
        do {
            // Byte 0's lock, held exclusively while the size is checked and made whole, so
            // that no opener maps the file while another extends it.
            try POSIXSharedFile.lock(fd, 0, exclusive: true, wait: true, path: path)
            defer { _ = cplatform_unlock_byte(fd, 0) }
            var info = stat()
            guard fstat(fd, &info) == 0 else { throw FileIOError(errno: errno, operation: .read, path: path) }
            guard info.st_mode & S_IFMT == S_IFREG else { throw FileIOError(errno: EINVAL, operation: .open, path: path) }
            if Int(info.st_size) < byteCount {
                try retryingInterrupts(.truncate, path) { ftruncate(fd, off_t(byteCount)) }
            }
            guard let base = mmap(nil, byteCount, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), base != MAP_FAILED else {
                throw FileIOError(errno: errno, operation: .read, path: path)
            }
            return POSIXSharedFile(fd: fd, path: path, base: base, byteCount: byteCount)
        } catch {
            _ = systemClose(fd)
            throw error
        }
    }
}

/// Runs a syscall that returns -1 and sets errno on failure, retrying EINTR.
@discardableResult
func retryingInterrupts(_ operation: FileOperation, _ path: String, _ call: () -> Int32) throws -> Int32 {
    while true {
        let result = call()
        if result >= 0 { return result }
        if errno == EINTR { continue }
        throw FileIOError(errno: errno, operation: operation, path: path)
    }
}

/// An open POSIX file descriptor.
final class POSIXOpenFile: OpenFile {
    let path: String
    private let fd: Int32
    private let isOpen = Locked(true)

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit {
        if isOpen.withLock({ $0 }) { _ = systemClose(fd) }
    }

    private func checkOpen(_ operation: FileOperation) throws {
        guard isOpen.withLock({ $0 }) else { throw FileIOError.closed(operation: operation, path: path) }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try checkOpen(.read)
        var done = 0
        while done < buffer.count {
            let got = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if got < 0 {
                if errno == EINTR { continue }
                throw FileIOError(errno: errno, operation: .read, path: path)
            }
            if got == 0 { break }
            done += got
        }
        return done
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        try checkOpen(.write)
        var done = 0
        while done < bytes.count {
            let put = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if put < 0 {
                if errno == EINTR { continue }
                throw FileIOError(errno: errno, operation: .write, path: path)
            }
            // A zero-byte write with bytes left means the device accepts no more.
            if put == 0 { throw FileIOError.noSpace(operation: .write, path: path) }
            done += put
        }
    }

    func append(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        let offset = try size()
        try write(bytes, at: offset)
        return offset
    }

    func size() throws -> Int64 {
        try checkOpen(.size)
        var info = stat()
        if fstat(fd, &info) != 0 { throw FileIOError(errno: errno, operation: .size, path: path) }
        return Int64(info.st_size)
    }

    func syncData() throws {
        try checkOpen(.syncData)
        if cplatform_sync_data(fd) != 0 { throw FileIOError(errno: errno, operation: .syncData, path: path) }
    }

    func sync() throws {
        try checkOpen(.sync)
        if cplatform_sync_full(fd) != 0 { throw FileIOError(errno: errno, operation: .sync, path: path) }
    }

    func truncate(to size: Int64) throws {
        try checkOpen(.truncate)
        try retryingInterrupts(.truncate, path) { ftruncate(fd, off_t(size)) }
    }

    func allocate(offset: Int64, length: Int64) throws {
        try checkOpen(.allocate)
        try retryingInterrupts(.allocate, path) { cplatform_fallocate(fd, off_t(offset), off_t(length)) }
    }

    /// An error here is not lost: a failed writeback is reported by the next `syncData`.
    func startWriteback() {
        guard (try? checkOpen(.syncData)) != nil else { return }
        _ = cplatform_start_writeback(fd)
    }

    func mapReadOnly(length: Int) throws -> FileMapping? { try mapReadOnly(length: length, reserving: length) }

    func mapReadOnly(length: Int, reserving: Int) throws -> FileMapping? {
        try checkOpen(.read)
        // The span is reserved first (no access, no memory, no swap charged), then the file
        // mapped over its start; where the system refuses the span, the file alone.
        if reserving > length,
           let span = mmap(nil, reserving, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), span != MAP_FAILED {
            guard let base = mmap(span, length, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0), base != MAP_FAILED else {
                let error = FileIOError(errno: errno, operation: .read, path: path)
                munmap(span, reserving)
                throw error
            }
            return FileMapping(base: base, length: length, reservedLength: reserving)
        }
        guard let base = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0), base != MAP_FAILED else {
            throw FileIOError(errno: errno, operation: .read, path: path)
        }
        return FileMapping(base: base, length: length)
    }

    func growMapping(_ mapping: FileMapping, to length: Int) -> Bool {
        guard (try? checkOpen(.read)) != nil, length <= mapping.reservedLength else { return false }
        let mapped = mapping.length
        guard length > mapped else { return true }
        // Only the part not mapped yet is mapped, at its place in the span: pages already
        // mapped (and being read) are left alone. An offset the system's page size does not
        // divide cannot be mapped on its own: the whole prefix is mapped again, which
        // replaces the old pages atomically (a reader faults the new ones in).
        let pageSize = Int(getpagesize())
        let start = mapped % pageSize == 0 ? mapped : 0
        let address = UnsafeMutableRawPointer(mutating: mapping.base) + start
        guard let placed = mmap(address, length - start, PROT_READ, MAP_SHARED | MAP_FIXED, fd, off_t(start)),
              placed != MAP_FAILED else { return false }
        mapping.didGrow(to: length)
        return true
    }

    func close() throws {
        let wasOpen = isOpen.withLock { open in
            defer { open = false }
            return open
        }
        guard wasOpen else { return }
        // close(2) is not retried on EINTR: on Linux the descriptor is released regardless.
        if systemClose(fd) != 0 && errno != EINTR {
            throw FileIOError(errno: errno, operation: .close, path: path)
        }
    }
}

/// A shared file mapped with MAP_SHARED, with open-file-description byte locks.
final class POSIXSharedFile: SharedFile, @unchecked Sendable {
    // @unchecked: `fd`, `base` and `byteCount` never change until `close()`, which the
    // owner calls once, after its last use.
    let path: String
    let base: UnsafeMutableRawPointer
    let byteCount: Int
    private let fd: Locked<Int32?>

    init(fd: Int32, path: String, base: UnsafeMutableRawPointer, byteCount: Int) {
        self.fd = Locked(fd)
        self.path = path
        self.base = base
        self.byteCount = byteCount
    }

    deinit { close() }

    static func lock(_ fd: Int32, _ offset: Int, exclusive: Bool, wait: Bool, path: String) throws {
        let code = cplatform_lock_byte(fd, off_t(offset), exclusive ? 1 : 0, wait ? 1 : 0)
        guard code != 0 else { return }
        throw FileIOError(errno: code == EACCES ? EWOULDBLOCK : code, operation: .lock, path: path)
    }

    func lockByte(_ offset: Int, exclusive: Bool, wait: Bool) throws -> Bool {
        guard let descriptor = fd.withLock({ $0 }) else { throw FileIOError.closed(operation: .lock, path: path) }
        do {
            try Self.lock(descriptor, offset, exclusive: exclusive, wait: wait, path: path)
            return true
        } catch FileIOError.locked {
            return false
        }
    }

    func unlockByte(_ offset: Int) {
        guard let descriptor = fd.withLock({ $0 }) else { return }
        _ = cplatform_unlock_byte(descriptor, off_t(offset))
    }

    func close() {
        guard let descriptor = fd.withLock({ value in defer { value = nil }; return value }) else { return }
        munmap(base, byteCount)
        _ = systemClose(descriptor)
    }
}

/// A held flock(2) lock.
final class POSIXFileLock: FileLock {
    let path: String
    private let fd: Locked<Int32?>

    init(fd: Int32, path: String) {
        self.fd = Locked(fd)
        self.path = path
    }

    deinit { unlock() }

    func unlock() {
        guard let descriptor = fd.withLock({ value in defer { value = nil }; return value }) else { return }
        _ = flock(descriptor, LOCK_UN)
        _ = systemClose(descriptor)
    }
}
