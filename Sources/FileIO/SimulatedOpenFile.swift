// Handles and locks of a `SimulatedFileSystem`. Every call takes the file system's mutex,
// is numbered and counted there, and fails with `closed` once a crash has outlived it.
import Foundation
import StrataLocks

final class SimulatedOpenFile: OpenFile {
    let path: String
    private let fileSystem: SimulatedFileSystem
    private let inode: Int
    private let generation: Int
    private let isOpen = Locked(true)

    init(fileSystem: SimulatedFileSystem, inode: Int, path: String, generation: Int) {
        self.fileSystem = fileSystem
        self.inode = inode
        self.path = path
        self.generation = generation
    }

    /// Runs `body` on the state after numbering the operation and checking the handle;
    /// `body` also gets the fault injected into the operation, if one changes what it does.
    private func perform<T>(_ operation: FileOperation,
                            _ body: (inout SimulatedState, Int, SimulatedFileSystem.InjectedFault?) throws -> T) throws -> T {
        guard isOpen.withLock({ $0 }) else { throw FileIOError.closed(operation: operation, path: path) }
        return try fileSystem.state.withLock { state in
            let fault = try state.begin(operation, path, generation: generation)
            guard state.inodes[inode] != nil else { throw FileIOError.closed(operation: operation, path: path) }
            return try body(&state, inode, fault)
        }
    }

    private func perform<T>(_ operation: FileOperation, _ body: (inout SimulatedState, Int) throws -> T) throws -> T {
        try perform(operation) { state, id, _ in try body(&state, id) }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try perform(.read) { state, id, fault in
            let image = state.inodes[id]!.volatile
            let start = Int(offset)
            guard start < image.count else { return 0 }
            let count = min(buffer.count, image.count - start)
            state.largestReadBytes = max(state.largestReadBytes, count)
            image.withUnsafeBytes { source in
                buffer.baseAddress!.copyMemory(from: source.baseAddress! + start, byteCount: count)
            }
            if fault == .corruptRead, count > 0 { buffer[count / 2] ^= 0x10 }
            return count
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        fileSystem.writeObserver.withLock { $0 }?(path)
        try perform(.write) { state, id, fault in
            guard fault == .shortWrite else { return state.write(id, bytes, at: Int(offset)) }
            state.write(id, UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count / 2)]), at: Int(offset))
            throw FileIOError.noSpace(operation: .write, path: path)
        }
    }

    func append(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        try perform(.append) { state, id in
            let offset = state.inodes[id]!.volatile.count
            state.write(id, bytes, at: offset)
            return Int64(offset)
        }
    }

    func size() throws -> Int64 {
        try perform(.size) { state, id in Int64(state.inodes[id]!.volatile.count) }
    }

    func syncData() throws {
        fileSystem.willSync(path)
        try perform(.syncData) { state, id, fault in try Self.sync(&state, id, fault, path: path, operation: .syncData) }
    }

    func sync() throws {
        fileSystem.willSync(path)
        try perform(.sync) { state, id, fault in try Self.sync(&state, id, fault, path: path, operation: .sync) }
    }

    private static func sync(_ state: inout SimulatedState, _ id: Int, _ fault: SimulatedFileSystem.InjectedFault?,
                             path: String, operation: FileOperation) throws {
        guard fault == .lostSync else { return state.sync(id) }
        state.loseUnsyncedChanges(id)
        throw FileIOError.ioError(operation: operation, path: path)
    }

    func truncate(to size: Int64) throws {
        try perform(.truncate) { state, id in state.resize(id, to: Int(size)) }
    }

    func allocate(offset: Int64, length: Int64) throws {
        try perform(.allocate) { state, id in
            let end = Int(offset + length)
            if state.inodes[id]!.volatile.count < end { state.resize(id, to: end) }
        }
    }

    func close() throws {
        isOpen.withLock { $0 = false }
        fileSystem.state.withLock { state in
            state.operationCount += 1
            state.counts[.close, default: 0] += 1
        }
    }
}

final class SimulatedFileLock: FileLock {
    let path: String
    private let fileSystem: SimulatedFileSystem
    private let generation: Int
    private let isHeld = Locked(true)

    init(fileSystem: SimulatedFileSystem, path: String, generation: Int) {
        self.fileSystem = fileSystem
        self.path = path
        self.generation = generation
    }

    deinit { unlock() }

    func unlock() {
        guard isHeld.withLock({ held in defer { held = false }; return held }) else { return }
        fileSystem.state.withLock { state in
            // A crash already released every lock of the earlier "process".
            guard state.generation == generation, let holders = state.locks[normalize(path)] else { return }
            state.locks[normalize(path)] = holders > 1 ? holders - 1 : nil
        }
    }
}

/// An opening of a simulated shared file: its byte locks live in the file system's state,
/// and a crash (the death of every process) releases them.
final class SimulatedSharedFile: SharedFile {
    let path: String
    private let fileSystem: SimulatedFileSystem
    private let memory: SimulatedSharedMemory
    private let opening: Int
    private let generation: Int
    private let isOpen = Locked(true)

    var base: UnsafeMutableRawPointer { memory.base }
    var byteCount: Int { memory.byteCount }

    init(fileSystem: SimulatedFileSystem, path: String, memory: SimulatedSharedMemory, opening: Int, generation: Int) {
        self.fileSystem = fileSystem
        self.path = path
        self.memory = memory
        self.opening = opening
        self.generation = generation
    }

    deinit { close() }

    func lockByte(_ offset: Int, exclusive: Bool, wait: Bool) throws -> Bool {
        guard isOpen.withLock({ $0 }) else { throw FileIOError.closed(operation: .lock, path: path) }
        while true {
            let taken = fileSystem.state.withLock { state -> Bool in
                // An opening from before a crash belongs to a dead process: it holds nothing.
                guard state.generation == generation else { return true }
                var lock = state.byteLocks[normalize(path), default: [:]][offset] ?? SimulatedByteLock()
                let others = lock.shared.subtracting([opening])
                if let owner = lock.exclusive, owner != opening { return false }
                if exclusive {
                    guard others.isEmpty else { return false }
                    lock.exclusive = opening
                    lock.shared.remove(opening)
                } else {
                    if lock.exclusive == opening { lock.exclusive = nil }
                    lock.shared.insert(opening)
                }
                state.byteLocks[normalize(path), default: [:]][offset] = lock
                return true
            }
            if taken || !wait { return taken }
            Thread.sleep(forTimeInterval: 0.001)
        }
    }

    func unlockByte(_ offset: Int) {
        fileSystem.state.withLock { state in
            guard state.generation == generation, var lock = state.byteLocks[normalize(path)]?[offset] else { return }
            if lock.exclusive == opening { lock.exclusive = nil }
            lock.shared.remove(opening)
            state.byteLocks[normalize(path)]![offset] = lock.exclusive == nil && lock.shared.isEmpty ? nil : lock
        }
    }

    func close() {
        guard isOpen.withLock({ open in defer { open = false }; return open }) else { return }
        fileSystem.state.withLock { state in
            guard state.generation == generation, var locks = state.byteLocks[normalize(path)] else { return }
            for (offset, var lock) in locks {
                if lock.exclusive == opening { lock.exclusive = nil }
                lock.shared.remove(opening)
                locks[offset] = lock.exclusive == nil && lock.shared.isEmpty ? nil : lock
            }
            state.byteLocks[normalize(path)] = locks
        }
    }
}
