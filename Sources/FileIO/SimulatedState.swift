// The state of a `SimulatedFileSystem`, mutated only behind its mutex: files (inodes with a
// durable and a volatile image and their unsynced changes), directories, operation counts,
// injected faults and the crash procedure of the fault model (SimulatedFileSystem.swift).

/// One unsynced change to a file, replayed (or not) by a crash.
enum PendingChange {
    case write(offset: Int, bytes: [UInt8])
    case resize(Int)
}

struct SimulatedInode {
    var volatile: [UInt8] = []
    var durable: [UInt8] = []
    var pending: [PendingChange] = []
}

struct SimulatedDirectory {
    var volatile: [String: Int] = [:]
    var durable: [String: Int] = [:]
}

struct Fault {
    let kind: SimulatedFileSystem.InjectedFault
    let firstIndex: Int
    let persistent: Bool
    let operations: Set<FileOperation>?

    /// Whether the fault fires for operation `index`: the first matching operation at or
    /// after `firstIndex` (a fault that is not persistent is then removed), and with
    /// `persistent` every matching one after it.
    func matches(index: Int, operation: FileOperation) -> Bool {
        guard operations?.contains(operation) ?? true else { return false }
        return index >= firstIndex
    }
}

struct SimulatedState {
    var inodes: [Int: SimulatedInode] = [:]
    var directories: [String: SimulatedDirectory] = ["/": SimulatedDirectory()]
    var nextInode = 1
    var operationCount = 0
    var counts: [FileOperation: Int] = [:]
    /// The most bytes one read returned.
    var largestReadBytes = 0
    var faults: [Fault] = []
    var powerCutIndex: Int?
    var generation = 0
    /// Directories whose name in their parent is not durable yet (created since the
    /// parent's last sync): a power loss may take them, with everything in them.
    var unsyncedDirectories: Set<String> = []
    /// Held locks by normalized path: -1 exclusive, n > 0 that many shared holders.
    var locks: [String: Int] = [:]
    /// Shared files (`openShared`) by normalized path: memory outside the file tree, which
    /// neither a sync nor a crash changes (it describes live processes only).
    var sharedFiles: [String: SimulatedSharedMemory] = [:]
    /// Byte locks of shared files by normalized path and offset: the openings holding each.
    var byteLocks: [String: [Int: SimulatedByteLock]] = [:]
    var nextSharedOpening = 1
    /// The sector size torn writes are cut at (fault model 3).
    var sectorBytes = 512

    /// Numbers the operation and throws the errno injected for it, if any. Returns a fault
    /// that changes what the operation does rather than failing it outright (a short
    /// write, a lost sync, a corrupted read), for the handle to carry out.
    @discardableResult
    mutating func begin(_ operation: FileOperation, _ path: String) throws -> SimulatedFileSystem.InjectedFault? {
        let index = operationCount
        operationCount += 1
        counts[operation, default: 0] += 1
        if let cut = powerCutIndex, index >= cut { throw FileIOError.ioError(operation: operation, path: path) }
        guard let position = faults.firstIndex(where: { $0.matches(index: index, operation: operation) }) else { return nil }
        let fault = faults[position]
        if !fault.persistent { faults.remove(at: position) }
        switch (fault.kind, operation) {
        case let (.errno(code), _):
            throw FileIOError(errno: code, operation: operation, path: path)
        case (.shortWrite, .write), (.lostSync, .syncData), (.lostSync, .sync), (.corruptRead, .read):
            return fault.kind
        default:
            throw FileIOError.ioError(operation: operation, path: path)
        }
    }

    /// Numbers an operation on a handle, first checking that the handle outlived no crash.
    @discardableResult
    mutating func begin(_ operation: FileOperation, _ path: String,
                        generation handleGeneration: Int) throws -> SimulatedFileSystem.InjectedFault? {
        guard handleGeneration == generation else { throw FileIOError.closed(operation: operation, path: path) }
        return try begin(operation, path)
    }

    func split(_ path: String, _ operation: FileOperation) throws -> (String, String) {
        let (directory, name) = splitPath(path)
        guard directories[directory] != nil, !name.isEmpty else {
            throw FileIOError.notFound(operation: operation, path: path)
        }
        return (directory, name)
    }

    func lookup(_ path: String) -> Int? {
        let (directory, name) = splitPath(path)
        return directories[directory]?.volatile[name]
    }

    mutating func makeInode() -> Int {
        defer { nextInode += 1 }
        inodes[nextInode] = SimulatedInode()
        return nextInode
    }

    mutating func write(_ id: Int, _ bytes: UnsafeRawBufferPointer, at offset: Int) {
        let copy = [UInt8](bytes)
        apply(.write(offset: offset, bytes: copy), to: &inodes[id]!.volatile)
        inodes[id]!.pending.append(.write(offset: offset, bytes: copy))
    }

    mutating func resize(_ id: Int, to size: Int) {
        apply(.resize(size), to: &inodes[id]!.volatile)
        inodes[id]!.pending.append(.resize(size))
    }

    mutating func sync(_ id: Int) {
        // Taken out of the table so its images are uniquely referenced and change in place.
        var inode = inodes.removeValue(forKey: id)!
        for change in inode.pending { apply(change, to: &inode.durable) }
        inode.pending.removeAll()
        inodes[id] = inode
    }

    /// A failed sync that lost the file's unsynced changes on the way to the medium (the
    /// "fsyncgate" behaviour of Linux): reads still see them, but no later sync will make
    /// them durable, and a crash takes them.
    mutating func loseUnsyncedChanges(_ id: Int) {
        inodes[id]!.pending.removeAll()
    }

    mutating func crash(_ fates: SimulatedFileSystem.CrashFates) {
        defer {
            faults.removeAll()
            powerCutIndex = nil
            locks.removeAll()
            byteLocks.removeAll()
            generation += 1
        }
        // A process kill: the kernel keeps every write and name, still unsynced, so a later
        // power loss can take them yet.
        if case .keepAll = fates {
            let live = Set(directories.values.flatMap { $0.volatile.values })
            for id in inodes.keys where !live.contains(id) { inodes[id] = nil }
            return
        }
        var random = SplitMix64(seed: fates.seed)
        for directory in unsyncedDirectories.sorted() {
            let keep = fates == .dropAll ? false : random.next() & 1 == 0
            guard !keep else { continue }
            for key in directories.keys where key == directory || key.hasPrefix(directory + "/") { directories[key] = nil }
        }
        unsyncedDirectories.removeAll()
        for key in directories.keys.sorted() {
            let keepVolatile = fates == .dropAll ? false : random.next() & 1 == 0
            if keepVolatile { directories[key]!.durable = directories[key]!.volatile }
            directories[key]!.volatile = directories[key]!.durable
        }
        let live = Set(directories.values.flatMap { $0.durable.values })
        for id in inodes.keys.sorted() {
            guard live.contains(id) else { inodes[id] = nil; continue }
            var image = inodes[id]!.durable
            for change in inodes[id]!.pending {
                switch fates {
                case .dropAll, .keepAll: break
                case .random: applyWithRandomFate(change, to: &image, sectorBytes: sectorBytes, tearAlways: false, random: &random)
                case .tornWrites: applyWithRandomFate(change, to: &image, sectorBytes: sectorBytes, tearAlways: true, random: &random)
                }
            }
            inodes[id] = SimulatedInode(volatile: image, durable: image, pending: [])
        }
    }
}

/// Applies one change to a file image.
func apply(_ change: PendingChange, to image: inout [UInt8]) {
    switch change {
    case let .write(offset, bytes):
        if image.count < offset + bytes.count {
            image += [UInt8](repeating: 0, count: offset + bytes.count - image.count)
        }
        image.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
    case let .resize(size):
        if size < image.count { image.removeSubrange(size...) }
        else { image += [UInt8](repeating: 0, count: size - image.count) }
    }
}

/// Keeps, drops or tears one unsynced change, as the generator says (with `tearAlways`,
/// every write is torn: a byte prefix or a subset of its sectors).
func applyWithRandomFate(_ change: PendingChange, to image: inout [UInt8], sectorBytes: Int, tearAlways: Bool,
                         random: inout SplitMix64) {
    let fate = tearAlways ? 2 + random.next() % 2 : random.next() % 4
    switch (change, fate) {
    case (_, 0):
        apply(change, to: &image)
    case (_, 1), (.resize, _):
        if case .resize = change, random.next() & 1 == 0 { apply(change, to: &image) }
    case let (.write(offset, bytes), 2):
        // A torn write: only a prefix of it reached the medium.
        let kept = Int(random.next() % UInt64(bytes.count + 1))
        if kept > 0 { apply(.write(offset: offset, bytes: Array(bytes[..<kept])), to: &image) }
    case let (.write(offset, bytes), _):
        // Sector by sector, each kept or not: later sectors may land while earlier ones do not.
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, (offset + start) / sectorBytes * sectorBytes + sectorBytes - offset)
            if random.next() & 1 == 0 {
                apply(.write(offset: offset + start, bytes: Array(bytes[start..<end])), to: &image)
            }
            start = end
        }
    }
}

/// SplitMix64: a small, fast, seedable generator whose streams are the same on every platform.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The memory of one simulated shared file, freed when no state refers to it.
final class SimulatedSharedMemory: @unchecked Sendable {
    // @unchecked: its bytes are accessed with atomic loads and stores by its users.
    let base: UnsafeMutableRawPointer
    let byteCount: Int

    init(byteCount: Int) {
        self.byteCount = byteCount
        base = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: 64)
        base.initializeMemory(as: UInt8.self, repeating: 0, count: byteCount)
    }

    deinit { base.deallocate() }
}

/// Who holds one byte lock: one opening exclusively, or openings sharing it.
struct SimulatedByteLock {
    var exclusive: Int?
    var shared: Set<Int> = []
}
