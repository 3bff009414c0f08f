// A consistent, read-only view of the store as of one version. Reads look in the active
// memtable, then the frozen one, then the B+tree the snapshot pinned; they take no lock
// and never block a writer or a checkpoint.

/// A read-only view of the store as of `version`. Release it (drop the last reference)
/// when done: while it lives, the pages of its tree are not reused.
public final class Snapshot: Sendable {
    /// The last commit this snapshot sees.
    public var version: UInt64 { state.version }

    let state: EngineState
    let engine: StorageEngine

    init(state: EngineState, engine: StorageEngine) {
        self.state = state
        self.engine = engine
    }

    deinit { engine.unpin(state) }

    /// The value of `key`, or nil when it has none. Throws `EngineError` for a corrupt page.
    public func get(_ key: [UInt8]) throws -> [UInt8]? {
        try key.withUnsafeBytes { key in try withValueBytes(key) { Array($0) } }
    }

    /// Calls `body` with the bytes of `key`'s value where they lie (in the memtable or in
    /// the data file's page) and returns its result, or returns nil without calling it when
    /// `key` has no value: a read that copies nothing. The span is valid only inside `body`.
    public func withValue<Result>(forKey key: [UInt8], _ body: (RawSpan) throws -> Result) throws -> Result? {
        try key.withUnsafeBytes { key in try withValueBytes(key) { value in try body(value.bytes) } }
    }

    /// `withValue` over raw buffers (the engine's and the contexts' own hot paths).
    @inline(__always)
    func withValueBytes<Result>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result? {
        if let node = memtableNode(key) {
            guard let value = node.value else { return nil }
            return try body(value)
        }
        var overflow: (first: PageID, byteCount: Int)?
        let result = try state.tree.withCell(key, file: engine.pageFile) { cell -> Result? in
            switch cell?.payload {
            case let .inline(value): return try body(value)
            case let .overflow(first, byteCount):
                overflow = (first, byteCount)
                return nil
            case .tombstone, nil: return nil
            }
        }
        guard let overflow else { return result }
        // A value in overflow pages is read out of the page's borrow.
        return try engine.pageFile.overflowValue(first: overflow.first, byteCount: overflow.byteCount).withUnsafeBytes(body)
    }

    /// Whether `key` has a value.
    public func contains(_ key: [UInt8]) throws -> Bool {
        try key.withUnsafeBytes { key in try withValueBytes(key) { _ in true } } ?? false
    }

    /// The version of the last commit at or below this snapshot's version that wrote
    /// `key` (a put or a delete), or 0 when none did.
    public func lastWriteVersion(_ key: [UInt8]) throws -> UInt64 {
        try key.withUnsafeBytes { key in
            if let node = memtableNode(key) { return node.version }
            return try state.tree.withCell(key, file: engine.pageFile) { $0?.version } ?? 0
        }
    }

    /// The newest change of `key` the memtables hold as of this snapshot's version.
    @inline(__always)
    private func memtableNode(_ key: UnsafeRawBufferPointer) -> MemtableNode? {
        if !state.active.isEmpty, let node = state.active.newestNode(key, at: state.version) { return node }
        guard let frozen = state.frozen, !frozen.isEmpty else { return nil }
        return frozen.newestNode(key, at: state.version)
    }

    /// Key/value pairs in key order (descending with `reverse`) with keys in `start..<end`
    /// (either bound optional) and starting with `prefix`, at most `limit` of them.
    /// O(log n + k) page reads for k results.
    public func scan(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = [],
                     reverse: Bool = false, limit: Int = .max) throws -> [(key: [UInt8], value: [UInt8])] {
        var results: [(key: [UInt8], value: [UInt8])] = []
        guard limit > 0 else { return results }
        var cursor = try self.cursor(KeyRange(from: start, to: end, prefix: prefix), reverse: reverse)
        while let pair = try cursor.next() {
            results.append(pair)
            if results.count == limit { break }
        }
        return results
    }

    /// A cursor over the key/value pairs in `range`, in key order (descending with
    /// `reverse`), reading pages as it goes. O(log n) to start.
    public func cursor(_ range: KeyRange = KeyRange(), reverse: Bool = false) throws -> SnapshotCursor {
        try SnapshotCursor(snapshot: self, range: range, reverse: reverse)
    }
}

/// A walk over a snapshot's key/value pairs in key order; it keeps the snapshot alive.
public struct SnapshotCursor {
    private let snapshot: Snapshot
    private let range: KeyRange
    private let reverse: Bool
    private var merge: MergedScan
    private var finished = false

    init(snapshot: Snapshot, range: KeyRange, reverse: Bool) throws {
        self.snapshot = snapshot
        self.range = range
        self.reverse = reverse
        // In reverse, begin at the last key below `upper`.
        merge = try MergedScan(state: snapshot.state, file: snapshot.engine.pageFile,
                               start: reverse ? range.upper : range.lower, reverse: reverse)
    }

    /// The next pair, or nil at the end of the range. Throws `EngineError` for a corrupt page.
    public mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        while !finished, let (key, entry) = try merge.next() {
            if reverse {
                if let upper = range.upper, compareKeys(key, upper) >= 0 { continue }
                if let lower = range.lower, compareKeys(key, lower) < 0 { break }
            } else {
                if let upper = range.upper, compareKeys(key, upper) >= 0 { break }
            }
            guard let value = try entry.value(snapshot.engine) else { continue }
            return (key, value)
        }
        finished = true
        return nil
    }
}

/// Where a merged entry came from: a memtable (value in hand) or a tree leaf.
enum ScanEntry {
    case memtable(MemtableEntry)
    case tree(LeafEntry)

    func value(_ engine: StorageEngine) throws -> [UInt8]? {
        switch self {
        case let .memtable(entry): entry.value
        case let .tree(entry): try engine.value(of: entry)
        }
    }
}

/// Merges the active memtable, the frozen one and the tree in key order; for a key in
/// several, the newest source wins.
struct MergedScan {
    private var active: MemtableIterator
    private var frozen: MemtableIterator?
    private var tree: TreeCursor
    private var heads: [(key: [UInt8], entry: ScanEntry)?] = [nil, nil, nil]
    private let reverse: Bool

    init(state: EngineState, file: PageFile, start: [UInt8]?, reverse: Bool) throws {
        self.reverse = reverse
        active = state.active.entries(from: start, reverse: reverse, at: state.version)
        frozen = state.frozen?.entries(from: start, reverse: reverse, at: state.version)
        tree = try state.tree.cursor(from: start, reverse: reverse, file: file)
        heads[0] = active.next().map { ($0.key, .memtable($0.value)) }
        heads[1] = frozen?.next().map { ($0.key, .memtable($0.value)) }
        heads[2] = try tree.next().map { ($0.key, .tree($0)) }
    }

    mutating func next() throws -> (key: [UInt8], entry: ScanEntry)? {
        var best: Int?
        for index in 0..<3 {
            guard let head = heads[index] else { continue }
            if let current = best {
                let order = compareKeys(head.key, heads[current]!.key)
                if reverse ? order > 0 : order < 0 { best = index }
            } else {
                best = index
            }
        }
        guard let best, let result = heads[best] else { return nil }
        // Advance every source sitting on this key; the lowest index (newest) won.
        for index in 0..<3 where heads[index].map({ compareKeys($0.key, result.key) == 0 }) == true {
            try advance(index)
        }
        return result
    }

    private mutating func advance(_ index: Int) throws {
        switch index {
        case 0: heads[0] = active.next().map { ($0.key, .memtable($0.value)) }
        case 1: heads[1] = frozen?.next().map { ($0.key, .memtable($0.value)) }
        default: heads[2] = try tree.next().map { ($0.key, .tree($0)) }
        }
    }
}
