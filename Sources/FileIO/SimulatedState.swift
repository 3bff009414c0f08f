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
    let errno: Int32
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
    var faults: [Fault] = []
    var powerCutIndex: Int?
    var generation = 0
    var locks: Set<String> = []

    /// Numbers the operation and throws the fault injected for it, if any.
    mutating func begin(_ operation: FileOperation, _ path: String) throws {
        let index = operationCount
        operationCount += 1
        counts[operation, default: 0] += 1
        if let cut = powerCutIndex, index >= cut { throw FileIOError.ioError(operation: operation, path: path) }
        if let position = faults.firstIndex(where: { $0.matches(index: index, operation: operation) }) {
            let fault = faults[position]
            if !fault.persistent { faults.remove(at: position) }
            throw FileIOError(errno: fault.errno, operation: operation, path: path)
        }
    }

    /// Numbers an operation on a handle, first checking that the handle outlived no crash.
    mutating func begin(_ operation: FileOperation, _ path: String, generation handleGeneration: Int) throws {
        guard handleGeneration == generation else { throw FileIOError.closed(operation: operation, path: path) }
        try begin(operation, path)
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

    mutating func crash(_ fates: SimulatedFileSystem.CrashFates) {
        defer {
            faults.removeAll()
            powerCutIndex = nil
            locks.removeAll()
            generation += 1
        }
        // A process kill: the kernel keeps every write and name, still unsynced, so a later
        // power loss can take them yet.
        if case .keepAll = fates {
            let live = Set(directories.values.flatMap { $0.volatile.values })
            for id in inodes.keys where !live.contains(id) { inodes[id] = nil }
            return
        }
        var random = SplitMix64(seed: { if case let .random(seed) = fates { seed } else { 0 } }())
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
                if fates != .dropAll { applyWithRandomFate(change, to: &image, random: &random) }
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

/// Keeps, drops or tears one unsynced change, as the generator says.
func applyWithRandomFate(_ change: PendingChange, to image: inout [UInt8], random: inout SplitMix64) {
    let sectorBytes = 512
    switch (change, random.next() % 4) {
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
