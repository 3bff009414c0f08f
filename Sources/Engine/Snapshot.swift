// A consistent, read-only view of the store as of one version. Reads look in the active
// memtable, then the frozen one, then the B+tree the snapshot pinned; they take no lock
// and never block a writer or a checkpoint.

/// A read-only view of the store as of `version`. Release it (drop the last reference)
/// when done: while it lives, the pages of its tree are not reused.
public final class Snapshot: Sendable {
    /// The last commit this snapshot sees.
    public var version: UInt64 { state.version }

    /// The view it reads, borrowed: the engine's snapshot registry holds it until this
    /// snapshot ends (SnapshotRegistry.R3). Held strongly, every snapshot retained and
    /// released it, atomic writes to a line every reading thread shares.
    unowned(unsafe) let state: EngineState
    let engine: StorageEngine
    /// The stripe of the engine's registry that counts it (SnapshotRegistry.swift).
    let stripe: Int
    /// Its point reads, over its view's memtables and tree.
    let reader: PointReader

    /// A snapshot of `view`, which `pin()` counted in `stripe` of `engine`'s registry.
    init(view: Unmanaged<EngineState>, engine: StorageEngine, stripe: Int) {
        state = view.takeUnretainedValue()
        self.engine = engine
        self.stripe = stripe
        reader = view._withUnsafeGuaranteedRef { PointReader(view: $0, file: engine.pageFile) }
    }

    deinit {
        // Borrowed for the call: the engine is released once, when the snapshot goes.
        Unmanaged.passUnretained(engine)._withUnsafeGuaranteedRef { $0.unpin(.passUnretained(state), stripe: stripe) }
    }

    /// The value of `key`, or nil when it has none. Throws `EngineError` for a corrupt page.
    public func get(_ key: [UInt8]) throws -> [UInt8]? {
        try key.withUnsafeBytes { key in try withValueBytes(key) { Array($0) } }
    }

    /// Calls `body` with the bytes of `key`'s value where they lie (in the memtable or in
    /// the data file's page) and returns its result, or returns nil without calling it when
    /// `key` has no value: a read that copies nothing. The span is valid only inside `body`.
    /// Inlinable over a non-generic core (`visitValue`): run unspecialized, a generic
    /// `Result` cost runtime metadata lookups per call (~970 instructions, more than the
    /// lookup itself, on readrandom); specialized where it is called, ~90.
    @inlinable
    public func withValue<Result>(forKey key: [UInt8], _ body: (RawSpan) throws -> Result) throws -> Result? {
        try value(forKey: key, body)
    }

    /// Calls `body` with `key`'s value where it lies and returns true, or returns false
    /// without calling it when `key` has no value.
    @usableFromInline
    func visitValue(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        try withValueBytes(key, body) != nil
    }

    /// `withValue` over raw buffers (the engine's and the contexts' own hot paths).
    @inline(__always)
    func withValueBytes<Result>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result? {
        try reader.withValueBytes(key, body)
    }

    /// `withValueBytes` with the tree's cells found by `cells` (a descent from the root, or
    /// an `OrderedReader`'s finger).
    @inline(__always)
    func withValueBytes<Result, Cells: LeafCellFinder>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result,
                                                       cells: inout Cells) throws -> Result? {
        try reader.withValueBytes(key, body, cells: &cells)
    }

    /// `withValueBytes` for a key the memtables do not hold: its value in the tree.
    @inline(__always)
    func withTreeValue<Result, Cells: LeafCellFinder>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result,
                                                      cells: inout Cells) throws -> Result? {
        try reader.withTreeValue(key, body, cells: &cells)
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

    /// Whether a commit after `version` (and at or below this snapshot's) wrote `key`: the
    /// same answer as `lastWriteVersion(key) > version`, without reading the tree when it
    /// holds no change newer than `version` (its checkpoint's version is at or below it).
    public func wasWritten(_ key: [UInt8], after version: UInt64) throws -> Bool {
        try key.withUnsafeBytes { key in
            if let node = memtableNode(key) { return node.version > version }
            guard state.treeVersion > version else { return false }
            return try state.tree.withCell(key, file: engine.pageFile) { $0.map { $0.version > version } } ?? false
        }
    }

    /// The keys in `range` that a commit after `version` (and at or below this snapshot's)
    /// wrote, in key order: what another commit changed in a range read at `version`.
    public func keysWritten(in range: KeyRange, after version: UInt64) throws -> [[UInt8]] {
        let keys = try state.keysWritten(in: range, after: version, file: engine.pageFile)
        // Nodes linked ahead of their publication are newer than this snapshot: not its.
        return try keys.filter { try wasWritten($0, after: version) }
    }

    /// The newest change of `key` the memtables hold as of this snapshot's version.
    @inline(__always)
    func memtableNode(_ key: UnsafeRawBufferPointer) -> MemtableNode? { reader.memtableNode(key) }

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

    /// How many keys `range` holds, counting no further than `limit`: what `forEach` would
    /// hand out, with no key or value read but where a count needs it (a value in overflow
    /// pages is not read).
    ///
    /// The memtables' keys of the range are walked in order (the newest change of each,
    /// active before frozen); between one and the next, the tree's cells are counted from
    /// their flags (`TreeCursor.countValues`), a leaf whose last key comes first without a
    /// key read, and the tree's cell of a key a memtable changed is passed over. The cost
    /// follows the memtables' keys in the range and the tree's leaves, not the tree's keys.
    public func count(_ range: KeyRange = KeyRange(), limit: Int = .max) throws -> Int {
        guard limit > 0 else { return 0 }
        engine.checkpointIfQuiet(state)
        var tree = try state.tree.cursor(from: range.lower, reverse: false, file: engine.pageFile)
        // All in the active memtable (nothing frozen, no key of the range in the tree):
        // its own walk, which reads ahead and reads no key but the bound's.
        if state.frozen?.isEmpty ?? true {
            let treeHasNone = try tree.currentKey().map { key in range.upper.map { upper in upper.withUnsafeBytes { compareBytes(key, $0) >= 0 } } ?? false } ?? true
            if treeHasNone { return state.active.count(range, at: state.version, limit: limit) }
        }
        var changes = NewestChanges(state: state, from: range.lower)
        return try range.upper.withUnsafeBytesIfPresent { upper in
            try Self.count(tree: &tree, changes: &changes, below: upper, limit: limit)
        }
    }

    /// `count(_:limit:)`'s merge of the memtables' changes and the tree's cells below
    /// `upper`. (Its loop in the closure that borrows `upper` copied the cursor and the
    /// changes in and out at each key, a tenth of a count: passed `inout`, they stay put.)
    private static func count(tree: inout TreeCursor, changes: inout NewestChanges, below upper: UnsafeRawBufferPointer?,
                              limit: Int) throws -> Int {
        var count = 0
        while let change = changes.next() {
            let key = change.key
            if let upper, compareBytes(key, upper) >= 0 { break }
            let (before, onKey) = try tree.countValues(before: key, limit: limit - count)
            count += before
            guard count < limit else { return limit }
            // The memtable's change stands for the tree's cell of the same key.
            if onKey { try tree.advance() }
            if change.value != nil { count += 1 }
            guard count < limit else { return limit }
        }
        return min(limit, count + (try tree.countValues(before: upper, limit: limit - count).count))
    }

    /// A cursor over the key/value pairs in `range`, in key order (descending with
    /// `reverse`), reading pages as it goes. O(log n) to start.
    public func cursor(_ range: KeyRange = KeyRange(), reverse: Bool = false) throws -> SnapshotCursor {
        try SnapshotCursor(snapshot: self, range: range, reverse: reverse)
    }

    /// Calls `body` with each key/value pair in `range`, in key order (descending with
    /// `reverse`), until it returns false: the bytes are read where they lie (memtable or
    /// mapped page) and valid only inside the call. Nothing is copied where the data file is
    /// mapped but a compressed value, or a large one a store of format 4 or before wrote. Throws `EngineError` for
    /// a corrupt page, or what `body` throws.
    public func forEach(_ range: KeyRange = KeyRange(), reverse: Bool = false,
                        _ body: (_ key: RawSpan, _ value: RawSpan) throws -> Bool) throws {
        var walk = try RangeWalk(snapshot: self, range: range, reverse: reverse)
        let file = engine.pageFile
        try walk.forEach { key, value in
            switch value {
            case let .bytes(bytes): try body(key.bytes, bytes.bytes)
            case let .overflow(large):
                try file.withOverflowValue(large) { value in try body(key.bytes, value.bytes) }
            }
        }
    }
}

extension Snapshot {
    /// A reader of many keys, one after another, for a caller that has them in ascending
    /// order (a page of records' related records, sorted): a key that falls within the
    /// data file's leaf page the previous one was found in is looked up there, without a
    /// descent from the root. Keys in any order are answered correctly, only slower.
    @usableFromInline package func orderedReader() -> OrderedReader { OrderedReader(snapshot: self) }
}

/// Point reads of one snapshot in ascending key order (`Snapshot.orderedReader()`); it
/// keeps the snapshot alive. Answers exactly what `Snapshot.withValue` answers.
@usableFromInline package struct OrderedReader {
    private let snapshot: Snapshot
    private var finger: LeafFinger

    init(snapshot: Snapshot) {
        self.snapshot = snapshot
        finger = LeafFinger(tree: snapshot.state.tree, file: snapshot.engine.pageFile)
    }

    /// `Snapshot.withValue(forKey:_:)`: calls `body` with the bytes of `key`'s value where
    /// they lie and returns its result, or nil when `key` has no value.
    @inlinable
    package mutating func withValue<Result>(forKey key: RawSpan, _ body: (RawSpan) throws -> Result) throws -> Result? {
        var result: Result?
        _ = try key.withUnsafeBytes { key in try visitValue(key) { value in result = try body(value.bytes) } }
        return result
    }

    /// Calls `body` with `key`'s value where it lies and returns true, or returns false.
    @usableFromInline
    mutating func visitValue(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        try snapshot.withValueBytes(key, body, cells: &finger) != nil
    }
}

/// A walk over a snapshot's key/value pairs in key order; it keeps the snapshot alive.
public struct SnapshotCursor {
    private let snapshot: Snapshot
    private var walk: RangeWalk

    init(snapshot: Snapshot, range: KeyRange, reverse: Bool) throws {
        self.snapshot = snapshot
        walk = try RangeWalk(snapshot: snapshot, range: range, reverse: reverse)
    }

    /// The next pair, or nil at the end of the range. Throws `EngineError` for a corrupt page.
    public mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        guard let (key, value) = try walk.next() else { return nil }
        switch value {
        case let .bytes(bytes): return (Array(key), Array(bytes))
        case let .overflow(value):
            return (Array(key), try snapshot.engine.pageFile.overflowValue(value))
        }
    }
}

/// The memtables' changes from a key on, in key order: for each key the newest change
/// at the state's version, the active memtable's before the frozen one's. (A struct, not
/// a nested function over the walk's variables: one captured them in boxes, and each
/// access was checked for exclusivity at run time.)
struct NewestChanges {
    private var active: MemtableIterator
    private var frozen: MemtableIterator?
    private var activeHead: MemtableNode?
    private var frozenHead: MemtableNode?

    init(state: EngineState, from start: [UInt8]?) {
        active = state.active.entries(from: start, reverse: false, at: state.version)
        frozen = state.frozen?.entries(from: start, reverse: false, at: state.version)
        activeHead = active.nextNode()
        frozenHead = frozen?.nextNode()
    }

    /// The next key's newest change, nil past the last.
    @inline(__always)
    mutating func next() -> MemtableNode? {
        guard let older = frozenHead else {
            guard let newer = activeHead else { return nil }
            activeHead = active.nextNode()
            return newer
        }
        guard let newer = activeHead else {
            frozenHead = frozen?.nextNode()
            return older
        }
        let order = compareBytes(newer.key, older.key)
        if order <= 0 { activeHead = active.nextNode() }
        if order >= 0 { frozenHead = frozen?.nextNode() }
        return order <= 0 ? newer : older
    }
}

/// A value as a walk finds it: its bytes in place, or where its overflow pages are.
enum WalkValue {
    case bytes(UnsafeRawBufferPointer)
    case overflow(LargeValue)
}

/// The live pairs of a snapshot in a key range, in order: the merge of its memtables and
/// tree with deletes dropped and the range's bounds applied. Each pair's bytes are valid
/// until the next call.
struct RangeWalk {
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
        snapshot.engine.checkpointIfQuiet(snapshot.state)
    }

    /// What the range says of a key met in the walk.
    private enum Verdict { case take, skip, stop }

    @inline(__always)
    private static func verdict(_ key: UnsafeRawBufferPointer, _ range: KeyRange, reverse: Bool) -> Verdict {
        range.lower.withUnsafeBytesIfPresent { lower in
            range.upper.withUnsafeBytesIfPresent { upper in verdict(key, lower: lower, upper: upper, reverse: reverse) }
        }
    }

    /// `verdict` with the range's bounds borrowed (a walk borrows them once, not per key).
    @inline(__always)
    private static func verdict(_ key: UnsafeRawBufferPointer, lower: UnsafeRawBufferPointer?, upper: UnsafeRawBufferPointer?,
                                reverse: Bool) -> Verdict {
        if reverse {
            // A reverse walk starts at or below `upper`: only its first keys can be at it.
            if let upper, compareBytes(key, upper) >= 0 { return .skip }
            if let lower, compareBytes(key, lower) < 0 { return .stop }
        } else if let upper, compareBytes(key, upper) >= 0 {
            return .stop
        }
        return .take
    }

    @inline(__always)
    mutating func next() throws -> (key: UnsafeRawBufferPointer, value: WalkValue)? {
        while !finished, let (key, value) = try merge.next() {
            switch Self.verdict(key, range, reverse: reverse) {
            case .stop: finished = true
            case .skip: continue
            case .take:
                guard let value else { continue }
                return (key, value)
            }
        }
        finished = true
        return nil
    }

    /// Calls `deliver` with each pair in turn until it returns false: `next()`, and after
    /// each pair the run of pairs that follow from the same source (`MergedScan.continueRun`),
    /// delivered without returning through `next()`.
    @inline(__always)
    mutating func forEach(_ deliver: (UnsafeRawBufferPointer, WalkValue) throws -> Bool) throws {
        let range = range
        try range.lower.withUnsafeBytesIfPresent { lower in
            try range.upper.withUnsafeBytesIfPresent { upper in try forEach(lower: lower, upper: upper, deliver) }
        }
    }

    /// `forEach` with the range's bounds borrowed.
    @inline(__always)
    private mutating func forEach(lower: UnsafeRawBufferPointer?, upper: UnsafeRawBufferPointer?,
                                  _ deliver: (UnsafeRawBufferPointer, WalkValue) throws -> Bool) throws {
        let reverse = reverse
        while let (key, value) = try next() {
            guard try deliver(key, value) else { return }
            var stopped = false
            _ = try merge.continueRun(below: reverse ? nil : upper) { key, value, inRange in
                switch inRange ? .take : Self.verdict(key, lower: lower, upper: upper, reverse: reverse) {
                case .stop:
                    stopped = true
                    return false
                case .skip: return true
                case .take:
                    guard let value else { return true }
                    stopped = try !deliver(key, value)
                    return !stopped
                }
            }
            if stopped {
                finished = true
                return
            }
        }
    }
}

/// Merges the active memtable, the frozen one and the tree in key order; for a key in
/// several, the newest source wins. Reads in place: each result is valid until the next
/// call (the sources it came from move on only then).
///
/// A source that gave the last pair alone usually gives the next one too (a memtable or
/// the tree holds runs of neighbouring keys), so the walk remembers it and the first key
/// among the other sources (the rival): the next pair costs one comparison until the rival
/// comes first; then every head is compared again.
struct MergedScan {
    private enum Source { case active, frozen, tree }

    private var active: MemtableIterator
    private var frozen: MemtableIterator?
    private var tree: TreeCursor
    private var activeHead: MemtableNode?
    private var frozenHead: MemtableNode?
    /// The tree cursor's key (its value is read only when it wins).
    private var treeKey: UnsafeRawBufferPointer?
    /// The sources the last result consumed (each moves on at the next call).
    private var consumed: (active: Bool, frozen: Bool, tree: Bool) = (false, false, false)
    /// The one source the last result came from, when no other held its key.
    private var winner: Source?
    /// The first key among the sources other than `winner`.
    private var rival: UnsafeRawBufferPointer?
    /// Where a run from the tree reads its leaf's cells (`TreeCursor.plainCells`), made at
    /// the walk's first such run.
    private var runCells: RunCells?
    private let reverse: Bool

    init(state: EngineState, file: PageFile, start: [UInt8]?, reverse: Bool) throws {
        self.reverse = reverse
        active = state.active.entries(from: start, reverse: reverse, at: state.version)
        frozen = state.frozen?.entries(from: start, reverse: reverse, at: state.version)
        tree = try state.tree.cursor(from: start, reverse: reverse, file: file)
        activeHead = active.nextNode()
        frozenHead = frozen?.nextNode()
        treeKey = try tree.currentKey()
    }

    // The helpers below are static: a method of this (large) struct called from `next()`
    // was handed a copy of it on every call (callgrind: a memcpy per pair).

    /// Whether `key` comes before `other` in a walk's direction.
    @inline(__always)
    private static func precedes(_ key: UnsafeRawBufferPointer, _ other: UnsafeRawBufferPointer, reverse: Bool) -> Bool {
        let order = compareBytes(key, other)
        return reverse ? order > 0 : order < 0
    }

    /// Moves `source` to its next key and returns it (nil at its end).
    @inline(__always)
    private mutating func advance(_ source: Source) throws -> UnsafeRawBufferPointer? {
        switch source {
        case .active:
            activeHead = active.nextNode()
            return activeHead?.key
        case .frozen:
            frozenHead = frozen?.nextNode()
            return frozenHead?.key
        case .tree:
            try tree.advance()
            treeKey = try tree.currentKey()
            return treeKey
        }
    }

    /// Keys a run from the tree goes, compared one by one, before it looks for a leaf's
    /// worth it may hand out without comparing. At 4, records-range at 300,000 records
    /// spent 2.3M instructions in 3,000 queries on looks at leaves whose last key came
    /// after the memtable's next one; at 16 they left the profile, and a scan is as fast.
    private static let stepsBeforeLeafRuns = 16

    /// After a pair that came from one source alone, hands `visit` the pairs that follow
    /// from that source while they come before every other source's head (one comparison
    /// each), until `visit` returns false. Returns false when `visit` did; true when the run
    /// ended, and `next()` goes on from there. With `bound` (a forward walk's upper bound,
    /// the same on every call), `visit` is also told when a key is known to come before it
    /// without comparing (`MemtableIterator.handedOut(before:)`): a walk of the active
    /// memtable that reads ahead compares a few keys a batch, not every key.
    @inline(__always)
    mutating func continueRun(below bound: UnsafeRawBufferPointer?,
                              _ visit: (UnsafeRawBufferPointer, WalkValue?, _ beforeBound: Bool) throws -> Bool) throws -> Bool {
        guard let source = winner else { return true }
        // A run from the tree that goes on past a few keys is handed out a leaf at a time
        // where it can be: the cells up to the leaf's last one when that one comes before
        // the rival, with no comparison and no `advance()` per cell. (A short run, such
        // as an index walk's that alternates with the memtable, is not worth the look at
        // its leaf's last key.) Only the tree's keys are counted: counting every source's
        // cost a memtable run's keys about 10 instructions each (records-range).
        var steps = 0
        var checkedLeaf = -1
        while true {
            if source == .tree, steps >= Self.stepsBeforeLeafRuns, tree.leavesEntered != checkedLeaf {
                checkedLeaf = tree.leavesEntered
                if let (end, beforeBound) = tree.runEnd(before: rival, bound: bound) {
                    tree.prefetchNextLeaf()
                    let keyBytes = tree.runKeyBytes()
                    let cells = runCells ?? RunCells()
                    runCells = cells
                    while true {
                        // The cells that hold their value in line, read a batch at a time;
                        // then one cell by `step`: one of another kind, the one after a full
                        // batch, or none at the run's end.
                        let read = tree.plainCells(through: end, into: cells)
                        if read > 0 {
                            let base = tree.leafBase
                            let prefix = tree.elidedBytes
                            for index in 0..<read {
                                let cell = cells.cells[index]
                                let key: UnsafeRawBufferPointer
                                if let keyBytes {
                                    copyKeyBytes(to: keyBytes + prefix, from: base + Int(cell.keyStart), count: Int(cell.keyLength))
                                    key = UnsafeRawBufferPointer(start: keyBytes, count: prefix + Int(cell.keyLength))
                                } else {
                                    key = UnsafeRawBufferPointer(start: base + Int(cell.keyStart), count: Int(cell.keyLength))
                                }
                                let value = UnsafeRawBufferPointer(start: base + Int(cell.valueStart), count: Int(cell.valueLength))
                                guard try visit(key, .bytes(value), beforeBound) else {
                                    // The walk stops on this cell: the cursor and the merge's view of the tree say so.
                                    tree.moveInRun(index + 1, onto: cell)
                                    treeKey = key
                                    return false
                                }
                            }
                            tree.moveInRun(read, onto: cells.cells[read - 1])
                        }
                        guard let (key, inline) = try tree.step(through: end, keyBytes: keyBytes) else { break }
                        let value = if let inline { WalkValue.bytes(inline) } else { try self.value(.tree) }
                        guard try visit(key, value, beforeBound) else {
                            treeKey = key
                            return false
                        }
                    }
                }
            }
            if source == .tree { steps &+= 1 }
            guard let key = try advance(source), rival.map({ Self.precedes(key, $0, reverse: reverse) }) ?? true else {
                // Moved past the run: the next call compares every head.
                winner = nil
                consumed = (false, false, false)
                return true
            }
            let before = if source == .active, let bound { active.handedOut(before: bound) } else { false }
            guard try visit(key, try value(source), before) else { return false }
        }
    }

    /// The next key and its newest value (nil for a delete), or nil at the end.
    mutating func next() throws -> (key: UnsafeRawBufferPointer, value: WalkValue?)? {
        if let source = winner {
            // Only `source` moves; it stays the winner while it stays ahead of the rival.
            winner = nil
            consumed = (false, false, false)
            if let key = try advance(source), rival.map({ Self.precedes(key, $0, reverse: reverse) }) ?? true {
                winner = source
                return (key, try value(source))
            }
        }
        if consumed.active { _ = try advance(.active) }
        if consumed.frozen { _ = try advance(.frozen) }
        if consumed.tree { _ = try advance(.tree) }
        // No frozen memtable, or none left of it: as the loop below, for two heads.
        if frozenHead == nil { return try nextOfActiveAndTree() }
        // The first key in the walk's direction; on a tie the newest source (active, then
        // frozen, then tree) gives the value and every source on the key moves on.
        var key: UnsafeRawBufferPointer?
        var lead = Source.active
        var tied = (active: false, frozen: false, tree: false)
        var runnerUp: UnsafeRawBufferPointer?
        for source in [Source.active, .frozen, .tree] {
            let candidate: UnsafeRawBufferPointer? = switch source {
            case .active: activeHead?.key
            case .frozen: frozenHead?.key
            case .tree: treeKey
            }
            guard let candidate else { continue }
            guard let current = key else {
                key = candidate
                lead = source
                tied = (source == .active, source == .frozen, source == .tree)
                continue
            }
            let order = compareBytes(candidate, current)
            if order == 0 {
                switch source {
                case .active: tied.active = true
                case .frozen: tied.frozen = true
                case .tree: tied.tree = true
                }
            } else if reverse ? order > 0 : order < 0 {
                runnerUp = current
                key = candidate
                lead = source
                tied = (source == .active, source == .frozen, source == .tree)
            } else if runnerUp.map({ Self.precedes(candidate, $0, reverse: reverse) }) ?? true {
                runnerUp = candidate
            }
        }
        consumed = tied
        guard let key else { return nil }
        if (tied.active ? 1 : 0) + (tied.frozen ? 1 : 0) + (tied.tree ? 1 : 0) == 1 {
            winner = lead
            rival = runnerUp
        }
        return (key, try value(lead))
    }

    /// `next()` when the frozen memtable has no head: the first of the active memtable's
    /// head and the tree's, the active one on a tie. (The loop over three sources that
    /// `next()` runs took about 110 instructions a call; a walk whose keys alternate
    /// between the memtable and the tree calls it for most keys.)
    @inline(__always)
    private mutating func nextOfActiveAndTree() throws -> (key: UnsafeRawBufferPointer, value: WalkValue?)? {
        guard let active = activeHead else {
            guard let key = treeKey else {
                consumed = (false, false, false)
                return nil
            }
            (consumed, winner, rival) = ((false, false, true), .tree, nil)
            return (key, try value(.tree))
        }
        let activeKey = active.key
        guard let key = treeKey else {
            (consumed, winner, rival) = ((true, false, false), .active, nil)
            return (activeKey, active.value.map(WalkValue.bytes))
        }
        let order = compareBytes(activeKey, key)
        if order == 0 {
            consumed = (true, false, true)
        } else if reverse ? order > 0 : order < 0 {
            (consumed, winner, rival) = ((true, false, false), .active, key)
        } else {
            (consumed, winner, rival) = ((false, false, true), .tree, activeKey)
            return (key, try value(.tree))
        }
        return (activeKey, active.value.map(WalkValue.bytes))
    }

    /// The value at `source`'s head (nil for a delete).
    @inline(__always)
    private mutating func value(_ source: Source) throws -> WalkValue? {
        switch source {
        case .active: activeHead!.value.map(WalkValue.bytes)
        case .frozen: frozenHead!.value.map(WalkValue.bytes)
        case .tree:
            switch try tree.currentContents() {
            case let .inline(value): .bytes(value)
            case let .overflow(value): .overflow(value)
            case .tombstone: nil
            }
        }
    }
}

/// A reader of one key's value at a time through a non-generic core, `visitValue`, which
/// calls its closure with the value's bytes where they lie and answers whether the key has
/// a value: `Snapshot` and `StorageEngine` (the newest value).
@usableFromInline
protocol ValueVisitor {
    func visitValue(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool
}

extension ValueVisitor {
    /// What `body` makes of `key`'s value, or nil when it has none: the generic shell of
    /// the public `withValue(forKey:_:)`s, inlined where they are called over the
    /// non-generic `visitValue` (see `Snapshot.withValue`).
    @inlinable
    func value<Result>(forKey key: [UInt8], _ body: (RawSpan) throws -> Result) throws -> Result? {
        var result: Result?
        try key.withUnsafeBytes { key in
            _ = try visitValue(key) { value in result = try body(value.bytes) }
        }
        return result
    }
}

extension Snapshot: ValueVisitor {}

/// Point reads of one view of the store (an `EngineState`): a key's newest change as of the
/// view's version in its memtables, else its cell in the view's tree. Everything borrowed:
/// valid while the view is pinned in the engine's registry (SnapshotRegistry.R3) and the
/// engine, which holds the file, lives. A snapshot reads through one; so does
/// `StorageEngine.withValue(forKey:_:)`, which pins the current view for one read.
struct PointReader {
    let version: UInt64
    let tree: BTree
    /// The view's memtables and the data file. Read through strong references, each lookup
    /// retained and released the active memtable (and each descent the file), atomic
    /// writes to lines every reading thread shares: ~100 of a range query's 4,469
    /// instructions a record.
    let active: Unmanaged<Memtable>
    let frozen: Unmanaged<Memtable>?
    let file: Unmanaged<PageFile>

    init(view: EngineState, file: PageFile) {
        version = view.version
        tree = view.tree
        active = .passUnretained(view.active)
        frozen = view.frozen.map { .passUnretained($0) }
        self.file = .passUnretained(file)
    }

    /// The newest change of `key` the memtables hold as of the view's version.
    @inline(__always)
    func memtableNode(_ key: UnsafeRawBufferPointer) -> MemtableNode? {
        let version = version
        let found = active._withUnsafeGuaranteedRef { active in
            active.isEmpty ? nil : active.newestNode(key, at: version)
        }
        if let found { return found }
        return frozen?._withUnsafeGuaranteedRef { frozen in
            frozen.isEmpty ? nil : frozen.newestNode(key, at: version)
        }
    }

    /// Calls `body` with `key`'s value where it lies and returns its result, or nil when
    /// `key` has no value; the tree descended from its root.
    @inline(__always)
    func withValueBytes<Result>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result? {
        var descent = TreeDescent(tree: tree, file: file)
        return try withValueBytes(key, body, cells: &descent)
    }

    /// `withValueBytes` with the tree's cells found by `cells` (a descent from the root, or
    /// an `OrderedReader`'s finger).
    @inline(__always)
    func withValueBytes<Result, Cells: LeafCellFinder>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result,
                                                       cells: inout Cells) throws -> Result? {
        if let node = memtableNode(key) {
            guard let value = node.value else { return nil }
            return try body(value)
        }
        return try withTreeValue(key, body, cells: &cells)
    }

    /// `withValueBytes` for a key the memtables do not hold: its value in the tree.
    @inline(__always)
    func withTreeValue<Result, Cells: LeafCellFinder>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Result,
                                                      cells: inout Cells) throws -> Result? {
        var overflow: LargeValue?
        let result = try cells.withCell(key) { cell -> Result? in
            switch cell?.payload {
            case let .inline(value): return try body(value)
            case let .overflow(value):
                overflow = value
                return nil
            case .tombstone, nil: return nil
            }
        }
        guard let overflow else { return result }
        // A value in overflow pages is read out of the page's borrow.
        return try file._withUnsafeGuaranteedRef { file in try file.withOverflowValue(overflow, body) }
    }
}
