// The file-system seam: every file operation the storage engine performs goes through
// these two protocols, so the same engine code runs on the real disk (`POSIXFileSystem`)
// and on the deterministic crash simulator (`SimulatedFileSystem`).
//
// Contracts every implementation keeps:
//  1. `write` writes every byte or throws; a short write is never returned as success.
//  2. `syncData` / `sync` are never retried by an implementation: a failure is reported
//     once and the caller decides (the WAL fails every waiter and stops; see FORMAT.md).
//  3. A new, renamed or removed name is durable only after `syncDirectory` of its folder.
//  4. Errors are `FileIOError`, naming the operation and the path.
// Implementations are `Sendable`; a `OpenFile` may be used from several threads at once
// for positional reads and writes (pread/pwrite semantics), as the kernel allows.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// How to open a file.
public struct FileOpenOptions: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Open for writing as well as reading.
    public static let write = FileOpenOptions(rawValue: 1 << 0)
    /// Create the file when it does not exist (implies `write`).
    public static let create = FileOpenOptions(rawValue: 1 << 1)
    /// Fail with `alreadyExists` when the file exists (with `create`).
    public static let exclusive = FileOpenOptions(rawValue: 1 << 2)
    /// Truncate the file to zero bytes on open (with `write`).
    public static let truncate = FileOpenOptions(rawValue: 1 << 3)
}

/// A directory tree of files: the operations Strata needs and nothing else.
public protocol FileSystem: Sendable {
    /// Opens (or creates) the file at `path`. Throws `FileIOError`.
    func open(_ path: String, options: FileOpenOptions) throws -> any OpenFile
    /// Atomically renames `source` to `destination`, replacing it. Durable after `syncDirectory`.
    func rename(_ source: String, to destination: String) throws
    /// Removes the file at `path`. Durable after `syncDirectory`.
    func removeFile(_ path: String) throws
    /// Creates the directory at `path` (and its missing parents); succeeds when it exists.
    func createDirectory(_ path: String) throws
    /// Makes the names in the directory at `path` durable (fsync of the directory).
    func syncDirectory(_ path: String) throws
    /// The names (not paths) of the entries in the directory at `path`, sorted.
    func contentsOfDirectory(_ path: String) throws -> [String]
    /// Whether a file or directory exists at `path`.
    func fileExists(_ path: String) -> Bool
    /// Takes an exclusive lock on the file at `path` (created if missing) without waiting:
    /// throws `FileIOError.locked` when another holder, in this process or another, has it.
    /// The lock is held until `unlock()` is called on the result or the process exits.
    func lockExclusively(_ path: String) throws -> any FileLock
    /// Takes a shared lock on the existing file at `path` without waiting and without
    /// writing anything: any number of shared holders at once, none beside an exclusive
    /// one. Throws `FileIOError.locked` when an exclusive holder has it, `.notFound` when
    /// the file does not exist.
    func lockShared(_ path: String) throws -> any FileLock
    /// Opens the file at `path` (created when missing, extended with zeros to `byteCount`
    /// bytes when shorter) as memory shared by every opener in every process, with locks on
    /// single bytes that belong to this opening. Not a durable file: it says what live
    /// processes are doing (a store's reader table). Throws `FileIOError`.
    func openShared(_ path: String, byteCount: Int) throws -> any SharedFile
}

/// An open file.
public protocol OpenFile: AnyObject, Sendable {
    /// The path the file was opened with.
    var path: String { get }
    /// Reads up to `buffer.count` bytes at `offset`; returns the number read (fewer only at
    /// the end of the file). Retries interrupted calls.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int
    /// Writes all of `bytes` at `offset`, extending the file if needed.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws
    /// Appends all of `bytes` at the current end of the file; returns the offset written at.
    func append(_ bytes: UnsafeRawBufferPointer) throws -> Int64
    /// The file's current size in bytes.
    func size() throws -> Int64
    /// fdatasync(2): the file's data, and the metadata needed to read it, are durable.
    func syncData() throws
    /// fsync(2): the file's data and all of its metadata are durable.
    func sync() throws
    /// ftruncate(2): sets the size to `size` bytes.
    func truncate(to size: Int64) throws
    /// fallocate(2): reserves `length` bytes at `offset`, extending the size when needed,
    /// so later writes there change no file size.
    func allocate(offset: Int64, length: Int64) throws
    /// Closes the handle; later calls throw `FileIOError.closed`.
    func close() throws
    /// Asks the system to start writing the file's dirty pages to the device and returns
    /// without waiting (a hint: it makes nothing durable, `syncData` does). Spreading a
    /// large write's device traffic this way keeps its final sync short, and so the syncs
    /// of other files queued behind it. Does nothing where the system has no such call.
    func startWriteback()
    /// Maps the first `length` bytes of the file read-only and shared, so reads of pages
    /// written later through this handle see the new bytes; nil when this file system maps
    /// nothing (the simulated one). `length` may exceed the file's size, but no byte at or
    /// past the end of the file may be touched (the kernel raises SIGBUS): the caller
    /// bounds every access by a size it knows.
    func mapReadOnly(length: Int) throws -> FileMapping?
    /// `mapReadOnly(length:)` in a span of `reserving` bytes of address space (no memory),
    /// which `growMapping` can later map more of the file into at the same addresses.
    func mapReadOnly(length: Int, reserving: Int) throws -> FileMapping?
    /// Maps the file's first `length` bytes into `mapping`, a mapping of this file, in
    /// place: the bytes mapped before stay where they are, and reads of them are never
    /// disturbed. False when `length` exceeds the span reserved, or the system refuses.
    func growMapping(_ mapping: FileMapping, to length: Int) -> Bool
}

extension OpenFile {
    public func mapReadOnly(length: Int) throws -> FileMapping? { nil }
    public func mapReadOnly(length: Int, reserving: Int) throws -> FileMapping? { try mapReadOnly(length: length) }
    public func growMapping(_ mapping: FileMapping, to length: Int) -> Bool { false }
    public func startWriteback() {}
}

/// A read-only shared mapping of a file (see `OpenFile.mapReadOnly`), unmapped when the
/// last reference goes.
public final class FileMapping: @unchecked Sendable {
    // @unchecked: the mapping is read-only; `discard()` swaps its pages atomically (mmap
    // MAP_FIXED), so a reader never sees an unmapped address.
    /// The first byte.
    public let base: UnsafeRawPointer
    /// Bytes of address space held from `base`: the file is mapped over the first
    /// `length`, and may grow into the rest (`OpenFile.growMapping`).
    public let reservedLength: Int
    private let mapped: Atomic<Int>

    /// Bytes mapped (virtual; only the file's own bytes may be read).
    public var length: Int { mapped.load(ordering: .acquiring) }

    init(base: UnsafeRawPointer, length: Int, reservedLength: Int? = nil) {
        self.base = base
        self.mapped = Atomic(length)
        self.reservedLength = max(length, reservedLength ?? length)
    }

    deinit { munmap(UnsafeMutableRawPointer(mutating: base), reservedLength) }

    /// Records that the file is now mapped over the first `length` bytes (its opener, once
    /// the system mapped them).
    func didGrow(to length: Int) { mapped.store(length, ordering: .releasing) }

    /// Lets the process's page tables go for the mapped bytes `offset ..< offset + length`
    /// (MADV_DONTNEED): the file's pages stay in the kernel's page cache, out of the
    /// process's resident set, and a later read of them faults them in again with the
    /// same bytes. For pages no reader is expected to read soon (a checkpoint's freed
    /// pages). Only the system's whole pages inside the range go (a system page of 16 or
    /// 64 KiB under several of the caller's pages stays), and bytes past the mapped length
    /// are left alone.
    public func release(offset: Int, length: Int) {
        let systemPage = Int(getpagesize())
        let start = (max(0, offset) + systemPage - 1) / systemPage * systemPage
        let end = min(offset + length, self.length) / systemPage * systemPage
        guard end > start else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base + start), end - start, MADV_DONTNEED)
    }

    /// Replaces the mapped file pages with zero-filled memory in place, before the file is
    /// cut short: a reader still holding an address reads zeros (which fail every page
    /// check) instead of faulting on a page past the new end of the file.
    public func discard() {
        _ = mmap(UnsafeMutableRawPointer(mutating: base), length, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    }
}

/// A small file mapped into memory and shared by every process that opens it (see
/// `FileSystem.openShared`). Callers read and write its words with atomic loads and
/// stores. Its byte locks belong to this opening: they are released by `close()`, by the
/// opening's deinit, or by its process's death, and two openings in one process conflict
/// as two processes do.
public protocol SharedFile: AnyObject, Sendable {
    var path: String { get }
    /// The first mapped byte; `byteCount` bytes are mapped, readable and writable.
    var base: UnsafeMutableRawPointer { get }
    var byteCount: Int { get }
    /// Takes the lock on byte `offset`, exclusive or shared. With `wait` false, returns
    /// false at once when another opening holds a conflicting lock. Throws `FileIOError`.
    func lockByte(_ offset: Int, exclusive: Bool, wait: Bool) throws -> Bool
    /// Releases this opening's lock on byte `offset` (nothing when it holds none).
    func unlockByte(_ offset: Int)
    /// Unmaps the memory and releases every lock of this opening; later use is a bug.
    func close()
}

/// A lock on a file (exclusive or shared), held until `unlock()`.
public protocol FileLock: AnyObject, Sendable {
    /// The locked path.
    var path: String { get }
    /// Releases the lock. Idempotent.
    func unlock()
}

extension OpenFile {
    /// Reads exactly `count` bytes at `offset`, or fewer when the file ends first.
    /// `count` is the caller's bound: callers never pass a length taken from disk unchecked.
    public func read(count: Int, at offset: Int64) throws -> [UInt8] {
        precondition(count >= 0, "negative read length")
        // Read straight into uninitialized storage: only the bytes read become the array's
        // (zero-filling first cost as much as the read when opening a large log segment).
        return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = try read(into: UnsafeMutableRawBufferPointer(buffer), at: offset)
        }
    }

    /// Writes a byte array at `offset`.
    public func write(_ bytes: [UInt8], at offset: Int64) throws {
        try bytes.withUnsafeBytes { try write($0, at: offset) }
    }

    /// Appends a byte array; returns the offset written at.
    @discardableResult
    public func append(_ bytes: [UInt8]) throws -> Int64 {
        try bytes.withUnsafeBytes { try append($0) }
    }
}

extension FileSystem {
    /// Creates the directory at `path` and its missing parents, and makes each new name
    /// durable: a new directory's entry lives in its parent, so the parent is synced
    /// (without that, a power loss may take the directory and every file in it).
    public func createDirectoryDurably(_ path: String) throws {
        var missing: [String] = []
        var current = path
        while !fileExists(current) {
            missing.append(current)
            let parent = parentDirectory(of: current)
            if parent == current { break }
            current = parent
        }
        guard !missing.isEmpty else { return }
        try createDirectory(path)
        for directory in missing.reversed() { try syncDirectory(parentDirectory(of: directory)) }
    }
}

/// The directory holding `path`: "/" for a top-level absolute path, "." for a single
/// relative name.
package func parentDirectory(of path: String) -> String {
    var trimmed = Substring(path)
    while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
    guard let slash = trimmed.lastIndex(of: "/") else { return "." }
    let parent = trimmed[..<slash]
    return parent.isEmpty ? "/" : String(parent)
}

/// Joins path components with "/".
package func joinPath(_ directory: String, _ name: String) -> String {
    directory.hasSuffix("/") ? directory + name : directory + "/" + name
}
