// A deterministic, in-memory file system that can lose power.
//
// Fault model (docs/Durability.md; every item is something `crash(_:)` or an
// injected fault may do):
//  1. Every file has a durable image and a volatile one. Reads see the volatile image.
//     `syncData`/`sync` apply the file's unsynced changes to its durable image.
//  2. Every directory has durable and volatile entries; `syncDirectory` makes the volatile
//     entries durable. Creating a directory is durable at once.
//  3. Power loss, `crash(.random(seed:))`: each directory keeps its durable entries or (a
//     coin per directory) its volatile ones, so names not covered by a directory sync may
//     vanish; each surviving file starts from its durable image and replays its unsynced
//     writes in order, each kept whole, dropped, or torn (a random byte prefix, or a
//     random subset of its sectors, which also models writes persisting out of order).
//     `crash(.tornWrites(seed:))` tears every unsynced write. Sectors are 512 bytes unless
//     `setSectorBytes` says otherwise (4096 for 4Kn disks). A file grown but not synced
//     reads as its durable size plus whatever of the growth survived (zeros otherwise).
//  4. Process kill, `crash(.keepAll)`: every write and name survives but stays unsynced,
//     so a later power loss can still take it. `.dropAll` keeps only what was synced.
//  5. After a crash, every handle and lock from before it is dead: its calls throw `closed`.
//  6. `injectFault` at operation k, once or from then on: an errno (EIO, ENOSPC, EDQUOT,
//     EROFS, EINTR, …) mapped exactly as the POSIX implementation maps it, the operation
//     having no effect; a short write (half the bytes land, then ENOSPC); a lost sync
//     (EIO, and the unsynced changes will never be durable: "fsyncgate"); a corrupted read
//     (one byte of the returned data flipped). `cutPower(atOperation:)` fails every
//     operation from that index with EIO, freezing the state a later `crash` starts from.
//  7. `modify(path)` changes both images, as bit rot on the medium would.
// All state sits behind one mutex; operations are numbered in the order they take it.
import StrataLocks
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A simulated file system for tests: durable and volatile images, operation counts,
/// injected errors and seeded power loss.
public final class SimulatedFileSystem: FileSystem {
    /// What survives a simulated crash.
    public enum CrashFates: Sendable, Equatable {
        /// Unsynced writes are kept, dropped or torn, chosen by a generator seeded with `seed`.
        case random(seed: UInt64)
        /// Everything that reached the "kernel" survives, still unsynced (a process kill).
        case keepAll
        /// Only synced data and names survive.
        case dropAll
        /// As `.random`, but every unsynced write is torn: only a byte prefix of it, or a
        /// random subset of its sectors (`setSectorBytes`), reaches the medium.
        case tornWrites(seed: UInt64)

        var seed: UInt64 {
            switch self {
            case let .random(seed), let .tornWrites(seed): seed
            case .keepAll, .dropAll: 0
            }
        }
    }

    /// A fault to inject at an operation (`injectFault`).
    public enum InjectedFault: Sendable, Equatable {
        /// The operation fails with this errno and has no effect.
        case errno(Int32)
        /// A write stores only its first half, then fails with ENOSPC.
        case shortWrite
        /// An fdatasync or fsync fails with EIO and the file's unsynced changes are lost on
        /// the way to the medium (reads still see them; a retried sync "succeeds" without
        /// making them durable): Linux's behaviour that PostgreSQL met in 2018.
        case lostSync
        /// A read succeeds but one byte of what it returns is flipped (bit rot on the way).
        case corruptRead
    }

    let state = Locked(SimulatedState())
    /// How a sync behaves apart from its effect: how long it takes, and who is told.
    struct SyncBehaviour {
        var latency = Duration.zero
        var observer: (@Sendable (String) -> Void)?
    }
    let syncBehaviour = Locked(SyncBehaviour())
    /// Told of each positional write (`observeWrites`).
    let writeObserver = Locked<(@Sendable (String) -> Void)?>(nil)

    public init() {}

    // MARK: Test controls

    /// The number of operations performed so far.
    public var operationCount: Int { state.withLock { $0.operationCount } }

    /// The most bytes a single read has returned (so tests can check reads are bounded).
    public var largestReadBytes: Int { state.withLock { $0.largestReadBytes } }

    /// How many times `operation` was performed.
    public func count(of operation: FileOperation) -> Int { state.withLock { $0.counts[operation, default: 0] } }

    /// Fails the first matching operation whose index (0-based, in `operationCount` order)
    /// is `index` or later with `errno`; with `persistent`, every later matching operation
    /// fails too. `operations` limits which kinds match (all kinds when nil, so the fault
    /// hits exactly operation `index`).
    public func injectFault(errno code: Int32, atOperation index: Int, persistent: Bool = false,
                            operations: Set<FileOperation>? = nil) {
        injectFault(.errno(code), atOperation: index, persistent: persistent, operations: operations)
    }

    /// Injects `fault` at the first matching operation whose index is `index` or later
    /// (with `persistent`, at every matching one after it too). A fault that does not fit
    /// the operation it lands on (a short write on a rename) fails it with EIO instead.
    public func injectFault(_ fault: InjectedFault, atOperation index: Int, persistent: Bool = false,
                            operations: Set<FileOperation>? = nil) {
        state.withLock { $0.faults.append(Fault(kind: fault, firstIndex: index, persistent: persistent, operations: operations)) }
    }

    /// Sets the sector size torn writes are cut at (512 by default; 4096 for 4Kn disks).
    public func setSectorBytes(_ bytes: Int) {
        precondition(bytes > 0, "a sector has at least one byte")
        state.withLock { $0.sectorBytes = bytes }
    }

    /// Fails the next operation of kind `operation` (and, with `persistent`, all later ones).
    public func failNext(_ operation: FileOperation, errno code: Int32 = EIO, persistent: Bool = false) {
        state.withLock { state in
            state.faults.append(Fault(kind: .errno(code), firstIndex: state.operationCount, persistent: persistent,
                                      operations: [operation]))
        }
    }

    /// An independent copy of this file system as it stands (files, directories, unsynced
    /// changes, counts), so several crashes can be tried from one state. Handles and
    /// locks stay with the original; injected faults and the power cut are not copied.
    public func clone() -> SimulatedFileSystem {
        let copy = SimulatedFileSystem()
        var snapshot = state.withLock { $0 }
        snapshot.faults.removeAll()
        snapshot.powerCutIndex = nil
        snapshot.locks.removeAll()
        snapshot.sharedFiles.removeAll()
        snapshot.byteLocks.removeAll()
        snapshot.generation += 1
        copy.state.withLock { $0 = snapshot }
        return copy
    }

    /// Makes every fdatasync and fsync of a file or a directory take `latency` (the
    /// calling thread sleeps, outside the file system's lock), like a real disk's flush.
    public func setSyncLatency(_ latency: Duration) {
        syncBehaviour.withLock { $0.latency = latency }
    }

    /// Calls `observer` with the path of every file or directory about to be synced, on the syncing
    /// thread (nil stops it): tests use it to see which threads wait for the disk.
    public func observeSyncs(_ observer: (@Sendable (String) -> Void)?) {
        syncBehaviour.withLock { $0.observer = observer }
    }

    /// Calls `observer` with the path of every file about to take a positional write
    /// (`OpenFile.write(_:at:)`, not an append), on the writing thread (nil stops it):
    /// tests use it to hold a writer in the middle of its writes.
    public func observeWrites(_ observer: (@Sendable (String) -> Void)?) {
        writeObserver.withLock { $0 = observer }
    }

    /// Runs the latency and the observer of a sync of `path`.
    func willSync(_ path: String) {
        let behaviour = syncBehaviour.withLock { $0 }
        behaviour.observer?(path)
        if behaviour.latency > .zero {
            let (seconds, attoseconds) = behaviour.latency.components
            var delay = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
            var remaining = timespec()
            while nanosleep(&delay, &remaining) != 0 { delay = remaining }
        }
    }

    /// From operation `index` on, every operation fails with EIO and changes nothing.
    public func cutPower(atOperation index: Int) {
        state.withLock { $0.powerCutIndex = index }
    }

    /// Simulates a power loss (or, with `.keepAll`, a process kill): see the fault model at
    /// the top of this file. Clears injected faults and the power cut.
    public func crash(_ fates: CrashFates) {
        state.withLock { $0.crash(fates) }
    }

    /// Whether every name in the directory at `path` is durable (no create, rename or
    /// remove there since its last `syncDirectory`).
    public func isDirectorySynced(_ path: String) -> Bool {
        state.withLock { state in
            guard let directory = state.directories[normalize(path)] else { return false }
            return directory.durable == directory.volatile
        }
    }

    /// The volatile contents of the file at `path`, or nil when there is none.
    public func contents(of path: String) -> [UInt8]? {
        state.withLock { state in state.lookup(path).map { state.inodes[$0]!.volatile } }
    }

    /// Changes the file at `path` in both images, as if the disk itself changed (bit rot,
    /// a torn write found after the fact). Returns false when there is no such file.
    @discardableResult
    public func modify(_ path: String, _ body: (inout [UInt8]) -> Void) -> Bool {
        state.withLock { state in
            guard let id = state.lookup(path) else { return false }
            body(&state.inodes[id]!.volatile)
            state.inodes[id]!.durable = state.inodes[id]!.volatile
            state.inodes[id]!.pending.removeAll()
            return true
        }
    }

    // MARK: FileSystem

    public func open(_ path: String, options: FileOpenOptions) throws -> any OpenFile {
        try state.withLock { state in
            try state.begin(.open, path)
            let (directory, name) = try state.split(path, .open)
            let generation = state.generation
            if let id = state.directories[directory]!.volatile[name] {
                if options.contains(.create) && options.contains(.exclusive) {
                    throw FileIOError.alreadyExists(operation: .open, path: path)
                }
                if options.contains(.truncate) { state.resize(id, to: 0) }
                return SimulatedOpenFile(fileSystem: self, inode: id, path: path, generation: generation)
            }
            guard options.contains(.create) else { throw FileIOError.notFound(operation: .open, path: path) }
            let id = state.makeInode()
            state.directories[directory]!.volatile[name] = id
            return SimulatedOpenFile(fileSystem: self, inode: id, path: path, generation: generation)
        }
    }

    public func rename(_ source: String, to destination: String) throws {
        try state.withLock { state in
            try state.begin(.rename, source)
            let (fromDirectory, fromName) = try state.split(source, .rename)
            let (toDirectory, toName) = try state.split(destination, .rename)
            guard let id = state.directories[fromDirectory]!.volatile[fromName] else {
                throw FileIOError.notFound(operation: .rename, path: source)
            }
            state.directories[fromDirectory]!.volatile[fromName] = nil
            state.directories[toDirectory]!.volatile[toName] = id
        }
    }

    public func removeFile(_ path: String) throws {
        try state.withLock { state in
            try state.begin(.remove, path)
            let (directory, name) = try state.split(path, .remove)
            guard state.directories[directory]!.volatile.removeValue(forKey: name) != nil else {
                throw FileIOError.notFound(operation: .remove, path: path)
            }
        }
    }

    public func createDirectory(_ path: String) throws {
        try state.withLock { state in
            try state.begin(.createDirectory, path)
            var prefix = ""
            for component in normalize(path).split(separator: "/") {
                prefix += "/" + component
                if state.directories[prefix] == nil {
                    state.directories[prefix] = SimulatedDirectory()
                    state.unsyncedDirectories.insert(prefix)
                }
            }
        }
    }

    public func syncDirectory(_ path: String) throws {
        willSync(path)
        try state.withLock { state in
            try state.begin(.syncDirectory, path)
            let key = normalize(path)
            guard state.directories[key] != nil else { throw FileIOError.notFound(operation: .syncDirectory, path: path) }
            state.directories[key]!.durable = state.directories[key]!.volatile
            state.unsyncedDirectories = state.unsyncedDirectories.filter { splitPath($0).directory != key }
        }
    }

    public func contentsOfDirectory(_ path: String) throws -> [String] {
        try state.withLock { state in
            try state.begin(.list, path)
            guard let directory = state.directories[normalize(path)] else {
                throw FileIOError.notFound(operation: .list, path: path)
            }
            let subdirectories = state.directories.keys.compactMap { key -> String? in
                let (parent, name) = splitPath(key)
                return parent == normalize(path) && !name.isEmpty ? name : nil
            }
            return (Array(directory.volatile.keys) + subdirectories).sorted()
        }
    }

    public func fileExists(_ path: String) -> Bool {
        state.withLock { state in state.lookup(path) != nil || state.directories[normalize(path)] != nil }
    }

    public func lockExclusively(_ path: String) throws -> any FileLock {
        try state.withLock { state in
            try state.begin(.lock, path)
            let (directory, name) = try state.split(path, .lock)
            if state.directories[directory]!.volatile[name] == nil {
                state.directories[directory]!.volatile[name] = state.makeInode()
            }
            guard state.locks[normalize(path)] == nil else { throw FileIOError.locked(path: path) }
            state.locks[normalize(path)] = -1
            return SimulatedFileLock(fileSystem: self, path: path, generation: state.generation)
        }
    }

    public func lockShared(_ path: String) throws -> any FileLock {
        try state.withLock { state in
            try state.begin(.lock, path)
            guard state.lookup(path) != nil else { throw FileIOError.notFound(operation: .lock, path: path) }
            let holders = state.locks[normalize(path), default: 0]
            guard holders >= 0 else { throw FileIOError.locked(path: path) }
            state.locks[normalize(path)] = holders + 1
            return SimulatedFileLock(fileSystem: self, path: path, generation: state.generation)
        }
    }

    public func openShared(_ path: String, byteCount: Int) throws -> any SharedFile {
        try state.withLock { state in
            try state.begin(.open, path)
            _ = try state.split(path, .open)
            let key = normalize(path)
            let memory = state.sharedFiles[key].flatMap { $0.byteCount >= byteCount ? $0 : nil }
                ?? SimulatedSharedMemory(byteCount: byteCount)
            state.sharedFiles[key] = memory
            defer { state.nextSharedOpening += 1 }
            return SimulatedSharedFile(fileSystem: self, path: path, memory: memory, opening: state.nextSharedOpening,
                                       generation: state.generation)
        }
    }
}

/// Normalizes a path to "/a/b" form (no trailing slash, no empty components).
func normalize(_ path: String) -> String {
    "/" + path.split(separator: "/").joined(separator: "/")
}

/// Splits a normalized path into its directory and its last component.
func splitPath(_ path: String) -> (directory: String, name: String) {
    let normal = normalize(path)
    guard let slash = normal.lastIndex(of: "/") else { return ("/", normal) }
    let directory = String(normal[..<slash])
    return (directory.isEmpty ? "/" : directory, String(normal[normal.index(after: slash)...]))
}
