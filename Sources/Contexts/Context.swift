// A context: a place to stage changes. A root context reads the store as of its snapshot;
// a child reads its parent as of the moment it was opened (MVCC). Writes go to the
// context's own overlay; committing a child merges that overlay into the parent with no
// I/O, committing the root makes it durable as one commit (docs/Contexts.md).
//
// Invariants:
//  Context.C1. Reads see the context's overlay, then each ancestor's overlay as of the fork,
//      nearest first, then the snapshot; a tombstone hides every level beneath it.
//  Context.C2. A context changes only while open; commit and discard end it, once.
//  Context.C3. A context with open children can be neither committed nor refreshed. Discarding
//      a context discards its open children. A child that is dropped without a commit is
//      discarded (a cancelled form is a child context simply thrown away).
//  Context.C4. A read range (`addReadRange`) makes a key written inside it by anyone else after
//      this context read it a conflict, as a key both wrote is: at a child's merge (the
//      parent's writes since the fork), at `refresh()` and at a root's commit (other
//      commits since the snapshot). A merge hands the child's ranges to the parent.
//  Context.C5. A context made for an observed query (`Store.observe`) notes in its recorder every
//      key it looks up and every range it walks, as far as the walk went, whatever layer
//      reads through it; nothing it reads bypasses the note (`snapshotWhenUnstaged` is
//      then nil, and a cursor notes its whole range).
//  Context.C6. An overlay entry's `snapshotHolds`, when set, is what the context's snapshot
//      says of its key (held or not): it is set only from a read of that snapshot, or
//      carried from an entry that knew it, within one tree of contexts, all of which read
//      the root's snapshot (a root with open children cannot refresh, Context.C3); a
//      root's `refresh()` clears it on each entry it keeps whose key another commit wrote
//      since the old snapshot.
// Thread-safety: not `Sendable`; a context belongs to the task that uses it, like a
// transaction. The store beneath it is shared.
import StrataEngine
import StrataWAL

/// Staged changes over a consistent view of the store. Open a root with
/// `store.makeContext()`, a child with `makeChild()`.
public final class Context {
    /// The store this context reads and commits to.
    public let store: Store
    /// The context this one commits into (nil for a root).
    public let parent: Context?
    /// How this context's commit into its parent (or a root's `refresh()`) treats keys
    /// changed on both sides after the fork.
    public let mergePolicy: MergePolicy
    /// 0 for a root, 1 for its children, and so on.
    public let depth: Int
    /// Whether writes are refused (`Store.read`).
    public let isReadOnly: Bool
    /// Open, committed or discarded.
    public private(set) var status = ContextStatus.open

    /// The store's state beneath every overlay (Context.C1).
    private(set) var snapshot: Snapshot
    /// The ancestors' overlays as of the fork, nearest first.
    let base: OverlayLayer?
    /// This context's staged writes.
    private(set) var overlay = Overlay()
    /// Key ranges its staged writes depend on without writing them (Context.C4), its children's
    /// included once they merged.
    private(set) var readRanges: [KeyRange] = []
    private var children: [WeakContext] = []
    /// What a layer above keeps for this context alone (the records layer: which indexes a
    /// read-only context's queries may use at its version). Contexts never read it.
    package var attachment: AnyObject?
    /// For an observed query's context: what it reads (Context.C5).
    let readRecorder: ReadRecorder?
    /// The store's count of published views when a read last looked for a snapshot of a
    /// newer tree (`snapshotForReads`).
    private var publicationsSeen: UInt64 = 0

    init(store: Store, snapshot: Snapshot, mergePolicy: MergePolicy, isReadOnly: Bool = false, recorder: ReadRecorder? = nil) {
        self.store = store
        self.parent = nil
        self.snapshot = snapshot
        self.base = nil
        self.mergePolicy = mergePolicy
        self.depth = 0
        self.isReadOnly = isReadOnly
        readRecorder = recorder
    }

    private init(parent: Context, mergePolicy: MergePolicy) {
        self.store = parent.store
        self.parent = parent
        self.snapshot = parent.snapshot
        self.base = OverlayLayer(overlay: parent.overlay, next: parent.base)
        self.mergePolicy = mergePolicy
        self.depth = parent.depth + 1
        self.isReadOnly = parent.isReadOnly
        readRecorder = parent.readRecorder
    }

    /// The version of the store this context reads.
    public var version: UInt64 { snapshot.version }

    /// The snapshot a read that bypasses the overlays goes to. A read-only root context
    /// (`Store.read`) moves to a snapshot of the same version once a checkpoint folded the
    /// memtable its snapshot reads (`StorageEngine.snapshot(newerTreeThan:publications:)`):
    /// the same pairs, read from the tree alone. A context that may write keeps the
    /// snapshot its conflicts are checked against.
    @inline(__always)
    private func snapshotForReads() -> Snapshot {
        if isReadOnly, parent == nil,
           let newer = store.engine.snapshot(newerTreeThan: snapshot, publications: &publicationsSeen) {
            snapshot = newer
        }
        return snapshot
    }

    /// Whether this context staged any change.
    public var hasChanges: Bool { !overlay.isEmpty }

    /// How many keys this context staged a put or a delete for.
    public var changeCount: Int { overlay.count }

    // MARK: Reading

    /// The value of `key` as this context sees it (Context.C1), or nil. O(depth · log n).
    /// Throws `ContextError.finished`, or `EngineError` for a corrupt page.
    public func get(_ key: [UInt8]) throws -> [UInt8]? {
        try checkOpen()
        readRecorder?.note(key)
        return try read(key, overlay: overlay)
    }

    /// Whether `key` has a value as this context sees it.
    public func contains(_ key: [UInt8]) throws -> Bool { try get(key) != nil }

    /// `get(key)`, and whether the snapshot beneath every overlay holds `key` when this
    /// read learned it: it went down to the snapshot, or its overlay entry knew
    /// (Context.C6); nil otherwise. Staged with the write that follows
    /// (`stage(_:_:snapshotHolds:)`), it spares the root's commit a second lookup of the
    /// key.
    package func getNotingSnapshot(_ key: [UInt8]) throws -> (value: [UInt8]?, snapshotHolds: Bool?) {
        try checkOpen()
        readRecorder?.note(key)
        return try readNotingSnapshot(key, overlay: overlay)
    }

    /// Key/value pairs as this context sees them, in key order (descending with
    /// `reverse`), with keys in `start..<end` (either bound optional) that start with
    /// `prefix`, at most `limit`. Every level is merged and tombstones hide what is beneath.
    public func scan(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = [],
                     reverse: Bool = false, limit: Int = .max) throws -> [(key: [UInt8], value: [UInt8])] {
        var results: [(key: [UInt8], value: [UInt8])] = []
        guard limit > 0 else {
            try checkOpen()
            return results
        }
        try forEach(from: start, to: end, prefix: prefix, reverse: reverse) { key, value in
            results.append((key, value))
            return results.count < limit
        }
        return results
    }

    /// Hands `body` the pairs `scan` would return, one at a time, until it returns false:
    /// the record layer's way to stop early without gathering what it will not use.
    package func forEach(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = [], reverse: Bool = false,
                 _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool) throws {
        try checkOpen()
        let range = KeyRange(from: start, to: end, prefix: prefix)
        if let readRecorder { return try recordedWalk(range, reverse: reverse, into: readRecorder, body) }
        if stagesNothing {
            // Nothing to merge: the snapshot's own walk, copying each pair once.
            return try snapshotForReads().forEach(range, reverse: reverse) { key, value in
                try body(key.withUnsafeBytes { Array($0) }, value.withUnsafeBytes { Array($0) })
            }
        }
        var cursor = try ContextCursor(self, range: range, reverse: reverse)
        while let pair = try cursor.next() {
            guard try body(pair.key, pair.value) else { return }
        }
    }

    /// `forEach` with the pairs lent rather than copied: with nothing staged at any level,
    /// straight from the snapshot's walk.
    @usableFromInline
    package func forEachLent(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = [], reverse: Bool = false,
                     _ body: (_ key: RawSpan, _ value: RawSpan) throws -> Bool) throws {
        try checkOpen()
        let range = KeyRange(from: start, to: end, prefix: prefix)
        if let readRecorder {
            return try recordedWalk(range, reverse: reverse, into: readRecorder) { key, value in try body(key.span.bytes, value.span.bytes) }
        }
        if stagesNothing { return try snapshotForReads().forEach(range, reverse: reverse, body) }
        var cursor = try ContextCursor(self, range: range, reverse: reverse)
        while let pair = try cursor.next() {
            guard try body(pair.key.span.bytes, pair.value.span.bytes) else { return }
        }
    }

    /// A walk of `range` that notes in `recorder` what it read (Context.C5): up to the key at which
    /// `body` stopped it, or all of it.
    private func recordedWalk(_ range: KeyRange, reverse: Bool, into recorder: ReadRecorder,
                              _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool) throws {
        var cursor = try ContextCursor(self, range: range, reverse: reverse, notesRange: false)
        while let pair = try cursor.next() {
            guard try body(pair.key, pair.value) else { return recorder.noteWalk(range, reverse: reverse, stoppedAfter: pair.key) }
        }
        recorder.noteWalk(range, reverse: reverse, stoppedAfter: nil)
    }

    /// The snapshot reads go straight to when neither this context nor an ancestor staged
    /// anything, else nil: a loop of point reads then reads it directly (no overlay
    /// lookups, no checks per read).
    @usableFromInline
    package func snapshotWhenUnstaged() throws -> Snapshot? {
        try checkOpen()
        // An observed query's reads are noted, so they go through the context.
        return stagesNothing && readRecorder == nil ? snapshotForReads() : nil
    }

    /// How many keys `scan` would return, counting no further than `limit`: the snapshot's
    /// count (`Snapshot.count`), no key or value copied, corrected by the writes staged in
    /// the range at any level, one by one (`countOverStaged`).
    @usableFromInline
    package func countKeys(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = [], limit: Int = .max) throws -> Int {
        try checkOpen()
        var count = 0
        guard limit > 0 else { return 0 }
        let range = KeyRange(from: start, to: end, prefix: prefix)
        if let readRecorder {
            // A count that stops at its limit read up to where it stopped, as its walk notes.
            guard limit == .max else {
                try forEach(from: start, to: end, prefix: prefix) { _, _ in
                    count += 1
                    return count < limit
                }
                return count
            }
            // A whole count read all of the range, as a whole walk would note it (Context.C5):
            // counted as below, without the walk.
            readRecorder.note(lower: range.lower, upper: range.upper)
            return stagesNothing ? try snapshot.count(range) : try countOverStaged(range, limit: limit)
        }
        if stagesNothing { return try snapshotForReads().count(range, limit: limit) }
        return try countOverStaged(range, limit: limit)
    }

    /// `countKeys` with writes staged: the snapshot's count of the range, corrected by each
    /// staged write in it (the nearest level's, for a key staged at several) that adds a
    /// key the snapshot lacks or removes one it holds, each looked up in the snapshot in
    /// key order. O(s log n) for s staged keys in the range on top of the snapshot's count
    /// (`Snapshot.count`), where a merged walk cost O(k) for the k keys of the range, with
    /// two copies each: a count of 100,000 keys with one write staged walked all of them.
    private func countOverStaged(_ range: KeyRange, limit: Int) throws -> Int {
        // Key -> whether the write holds a value; farther levels first, so nearer ones win.
        var staged: [[UInt8]: Bool] = [:]
        for level in overlayLevels.reversed() where !level.isEmpty {
            var entries = level.entries(from: range.lower)
            while let (key, entry) = entries.next() {
                if let upper = range.upper, compareKeys(key, upper) >= 0 { break }
                staged[key] = entry.value != nil
            }
        }
        var (adds, removes) = (0, 0)
        var reader = snapshot.orderedReader()
        for (key, holdsValue) in staged.sorted(by: { compareKeys($0.key, $1.key) < 0 }) {
            let held = try reader.withValue(forKey: key.span.bytes) { _ in true } ?? false
            if holdsValue && !held { adds += 1 }
            if !holdsValue && held { removes += 1 }
        }
        // Counted up to `limit + removes`: a count that reaches it is at least `limit`
        // whatever the staged writes remove.
        let (bound, overflow) = limit.addingReportingOverflow(removes)
        let counted = try snapshot.count(range, limit: overflow ? .max : bound)
        return min(limit, counted - removes + adds)
    }

    /// This context's overlay and its ancestors' as of the fork, nearest first: what its
    /// reads see above the snapshot, a nearer level's entry for a key hiding a farther one's.
    var overlayLevels: [Overlay] {
        var levels = [overlay]
        var layer = base
        while let current = layer {
            levels.append(current.overlay)
            layer = current.next
        }
        return levels
    }

    /// Whether neither this context nor any ancestor (as of the fork) staged anything, so
    /// reads are the snapshot's.
    private var stagesNothing: Bool {
        guard overlay.isEmpty else { return false }
        var layer = base
        while let current = layer {
            guard current.overlay.isEmpty else { return false }
            layer = current.next
        }
        return true
    }

    // MARK: Writing

    /// Stages `value` under `key`. Throws `EngineError.keyTooLarge` / `.valueTooLarge`
    /// (the limits are in `Limits`), `ContextError.finished`, `.readOnly`, or
    /// `.reservedKey` for a key starting with `0xFE` (records' keys: use a repository).
    public func put(_ key: [UInt8], _ value: [UInt8]) throws {
        try checkUnreserved(key)
        try stage(key, value)
    }

    /// Stages the removal of `key` (whether or not it has a value). Throws as `put` does.
    public func delete(_ key: [UInt8]) throws {
        try checkUnreserved(key)
        try stage(key, nil)
    }

    /// Stages a put (or, with nil, a delete) of any key, reserved ones included: the
    /// record layer's way in. An unchecked write (`isChecked: false`) is one whose value
    /// does not depend on what was read: conflict checks leave it out. A write that
    /// `tracksInsert` is logged as an insert when the snapshot does not hold its key, and
    /// left out when it deletes a key the snapshot does not hold (`rootBatch`), so change
    /// feeds tell inserts from updates. A write that `stampsVersion` (unchecked: its key
    /// is new) has its key's last 16 bytes replaced by the root's commit with the commit's
    /// version and its place among the commit's stamped keys
    /// (`WALBatch.versionStampedOperations`); staged, they keep such keys apart, and a zero
    /// version in the first 8 makes them sort before every committed key of their prefix.
    /// `snapshotHolds`: whether the snapshot holds `key`, as `getNotingSnapshot` found it
    /// just before (Context.C6), so that the commit need not look it up again; nil when
    /// not read.
    package func stage(_ key: [UInt8], _ value: [UInt8]?, isChecked: Bool = true, tracksInsert: Bool = false,
                       stampsVersion: Bool = false, snapshotHolds: Bool? = nil) throws {
        try checkWritable(key)
        if let value, value.count > Limits.maxValueBytes {
            throw EngineError.valueTooLarge(byteCount: value.count, limit: Limits.maxValueBytes)
        }
        // Only a checked write keeps what its read found: a refresh finds the keys written
        // since among the checked ones (Context.C6).
        let checked = isChecked && !stampsVersion
        let entry = OverlayEntry(value: value, isChecked: checked, tracksInsert: tracksInsert, stampsVersion: stampsVersion,
                                 snapshotHolds: checked ? snapshotHolds : nil)
        overlay.updateValue(entry, forKey: key)
    }

    /// Notes that this context's staged writes depend on what `range` holds, though they
    /// may write none of it (Context.C4): a relationship's target must still exist, no referrer
    /// may have joined the ones a delete rule saw. Costs nothing until a merge or commit.
    package func addReadRange(_ range: KeyRange) throws {
        try checkOpen()
        readRanges.append(range)
    }

    /// `addReadRange` of the one key `key`.
    package func addReadRange(key: [UInt8]) throws {
        try addReadRange(KeyRange(from: key, to: key + [0]))
    }

    /// Calls `body` with each key this context staged itself (not its ancestors), in key
    /// order, and its value (nil for a delete).
    package func forEachStaged(_ body: (_ key: [UInt8], _ value: [UInt8]?) throws -> Void) rethrows {
        var iterator = overlay.entries()
        while let (key, entry) = iterator.next() { try body(key, entry.value) }
    }

    private func checkUnreserved(_ key: [UInt8]) throws(ContextError) {
        guard key.first != Self.reservedKeyByte else { throw .reservedKey }
    }

    /// Keys starting with this byte belong to the layers above contexts: records, their
    /// indexes and bookkeeping (FORMAT.md, "Records").
    public static let reservedKeyByte: UInt8 = 0xFE

    // MARK: Children

    /// Opens a child: it sees this context as it is now (later writes here stay invisible
    /// to it) and commits into it. O(1) whatever this context holds. `mergePolicy`
    /// defaults to this context's. Throws `ContextError.finished`.
    public func makeChild(mergePolicy: MergePolicy? = nil) throws -> Context {
        try checkOpen()
        let child = Context(parent: self, mergePolicy: mergePolicy ?? self.mergePolicy)
        children.removeAll { $0.context?.status != .open }
        children.append(WeakContext(child))
        return child
    }

    /// The children opened here that are still open (Context.C3).
    public var openChildCount: Int {
        children.reduce(0) { $0 + ($1.context?.status == .open ? 1 : 0) }
    }

    // MARK: Ending

    /// Drops this context's changes and those of its open children, and ends it. A
    /// no-op on a context that already ended.
    public func discard() {
        guard status == .open else { return }
        for child in children { child.context?.discard() }
        children.removeAll()
        overlay = Overlay()
        readRanges = []
        status = .discarded
    }

    /// A child: merges its changes into the parent (no I/O) and ends. A root: makes its
    /// changes durable as one commit (one log frame, one fdatasync shared with concurrent
    /// commits) and ends. Blocks the calling thread for the fdatasync; from async code
    /// use `commit() async`.
    /// Throws `ContextError.mergeConflict` (child, `.error` policy), `.conflict` (root:
    /// another commit wrote the same keys first), `.childrenOpen`, `.finished`, or the
    /// engine's errors (`EngineError.log(.commitOutcomeUnknown)`: the fdatasync failed
    /// and the commit may or may not survive; over etcd, `EtcdError.commitOutcomeUnknown`). After a conflict the context stays open;
    /// after any other failure of a root commit it is discarded.
    @discardableResult
    public func commit() throws -> CommitReceipt {
        switch try beginCommit() {
        case let .done(receipt):
            return receipt
        case let .durable(batch, unchecked, start):
            do { return finished(try store.backend.commit(batch, readAt: snapshot, unchecked: unchecked, readRanges: readRanges), since: start) } catch {
                throw endAfterFailedCommit(error)
            }
        }
    }

    /// `commit()` for async code: it runs on the caller's actor, and a root suspends while
    /// the fdatasync runs on a thread outside the cooperative pool.
    @discardableResult
    nonisolated(nonsending) public func commit() async throws -> CommitReceipt {
        switch try beginCommit() {
        case let .done(receipt):
            return receipt
        case let .durable(batch, unchecked, start):
            do { return finished(try await store.backend.commit(batch, readAt: snapshot, unchecked: unchecked, readRanges: readRanges), since: start) } catch {
                throw endAfterFailedCommit(error)
            }
        }
    }

    /// A commit after its checks: finished (a child's merge, an empty root), or a root's
    /// batch still to make durable.
    private enum PendingCommit {
        case done(CommitReceipt)
        case durable(WALBatch, unchecked: Set<[UInt8]>, ContinuousClock.Instant)
    }

    private func beginCommit() throws -> PendingCommit {
        try checkCommittable()
        if let parent { return .done(try merge(into: parent)) }
        let start = ContinuousClock.now
        guard let (batch, unchecked) = try rootBatch() else { return .done(emptyReceipt()) }
        return .durable(batch, unchecked: unchecked, start)
    }

    /// The overlay as one batch and its unchecked keys, or nil (and the context ended)
    /// when it changes nothing. A put that tracks inserts (a record's) is an insert when the
    /// snapshot does not hold its key, and such a delete is left out when the snapshot does
    /// not hold its key (a record inserted and deleted in this context): the commit's conflict check vouches
    /// that what the snapshot says of those keys still holds when the batch commits, so
    /// change feeds tell inserted, updated and deleted apart (FORMAT.md, "Batch encoding").
    private func rootBatch() throws -> (WALBatch, Set<[UInt8]>)? {
        var batch = WALBatch()
        var unchecked = Set<[UInt8]>()
        batch.operations.reserveCapacity(overlay.count)
        var iterator = overlay.entries()
        while let (key, entry) = iterator.next() {
            guard entry.isChecked else {
                if entry.stampsVersion { batch.versionStampedOperations.append(batch.operations.count) }
                unchecked.insert(key)
                batch.operations.append(entry.value.map { .put(key: key, value: $0) } ?? .delete(key: key))
                continue
            }
            guard entry.tracksInsert else {
                batch.operations.append(entry.value.map { .put(key: key, value: $0) } ?? .delete(key: key))
                continue
            }
            // What the write's own read of the key found, when it read it (Context.C6).
            let held: Bool
            if let known = entry.snapshotHolds { held = known } else { held = try snapshot.contains(key) }
            switch (entry.value, held) {
            case let (value?, false): batch.operations.append(.insert(key: key, value: value))
            case let (value?, true): batch.operations.append(.put(key: key, value: value))
            case (nil, true): batch.operations.append(.delete(key: key))
            case (nil, false): continue
            }
        }
        guard !batch.operations.isEmpty else {
            status = .committed
            overlay = Overlay()
            return nil
        }
        return (batch, unchecked)
    }

    private func emptyReceipt() -> CommitReceipt {
        CommitReceipt(version: snapshot.version, changeCount: 0, rawByteCount: 0, storedByteCount: 0, groupSize: 0,
                      latency: .zero)
    }

    private func finished(_ result: CommitResult, since start: ContinuousClock.Instant) -> CommitReceipt {
        let receipt = CommitReceipt(version: result.version, changeCount: overlay.count, rawByteCount: result.rawByteCount,
                                    storedByteCount: result.storedByteCount, groupSize: result.groupSize,
                                    latency: ContinuousClock.now - start)
        status = .committed
        overlay = Overlay()
        readRanges = []
        return receipt
    }

    /// Maps a failed durable commit to the error to throw. A conflict leaves the context
    /// open (the caller may discard it, or refresh and commit again); any other failure
    /// discards it.
    private func endAfterFailedCommit(_ error: any Error) -> any Error {
        if case let EngineError.conflict(keys, readVersion) = error {
            return ContextError.conflict(keys: keys, readVersion: readVersion)
        }
        discard()
        return error
    }

    // MARK: State changes for merges

    func replaceOverlay(_ overlay: Overlay) { self.overlay = overlay }

    func replaceReadRanges(_ ranges: [KeyRange]) { readRanges = ranges }

    func replaceSnapshot(_ snapshot: Snapshot) { self.snapshot = snapshot }

    func endCommitted() {
        overlay = Overlay()
        readRanges = []
        status = .committed
    }

    // MARK: Checks

    @usableFromInline
    package func checkOpen() throws(ContextError) {
        guard status == .open else { throw .finished(status) }
    }

    private func checkWritable(_ key: [UInt8]) throws {
        try checkOpen()
        guard !isReadOnly else { throw ContextError.readOnly }
        guard !key.isEmpty, key.count <= Limits.maxKeyBytes else {
            throw EngineError.keyTooLarge(byteCount: key.count, limit: Limits.maxKeyBytes)
        }
    }

    private func checkCommittable() throws {
        try checkOpen()
        let open = openChildCount
        guard open == 0 else { throw ContextError.childrenOpen(count: open) }
    }
}

/// A parent's reference to a child that does not keep the child alive (Context.C3).
struct WeakContext {
    weak var context: Context?

    init(_ context: Context) { self.context = context }
}
