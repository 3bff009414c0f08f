// The memtable: committed changes not yet folded into the B+tree, as a skip list laid out
// in an arena (MemtableArena.swift), LevelDB style. Every change is a node of its own
// carrying its commit version, so a reader at version V sees, for each key, the newest
// node at or below V: a snapshot of the memtable is just a version number. Readers take
// no lock; the single writer links new nodes in and never changes or frees a published
// one; dropping the memtable frees its blocks. No node is reference counted.
//
// A node, at an 8-aligned address in the arena:
//   0  version      UInt64
//   8  valueLength  Int32   (-1 for a delete)
//  12  keyLength    UInt16
//  14  height       UInt8   (1...maxHeight)
//  15  flags        UInt8   (bit 0, `olderFollows`: the next node at level 0 is an older
//                            change of the same key, Memtable.K4)
//  16  links        height × 8 bytes, atomic: the next node at each level (0 = none)
//      key bytes, then value bytes
//
// Invariants:
//  Memtable.K1. At every level, nodes are in key order, and nodes of one key in strictly
//      decreasing version order (a newer change of a key is linked before the older ones).
//  Memtable.K2. A node is linked only after all its bytes and its own links are written (release
//      store; readers load links with acquire), and it never changes afterwards.
//  Memtable.K3. Versions are inserted in increasing order per key (the engine links batches in
//      version order: MemtableApplier.A1), so a reader at version V never misses
//      a node at or below V.
//  Memtable.K4. A node's `olderFollows` flag, set before it is linked, says whether the node after
//      it at level 0 has the same key, and stays right: nothing is ever linked between two
//      changes of one key (a later change is newer and goes before the newest, Memtable.K1 and Memtable.K3),
//      a node linked after a key's oldest change has another key, and none is unlinked.
//      So a walk tells a key's changes apart from the next key without reading keys.
// Thread-safety: `insert`/`apply` only from one thread at a time (the engine's applier,
// or recovery before the memtable is shared); every other member from any thread.
import Atomics
import CStrataPlatform
import StrataWAL
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A change as the memtable keeps it: the value (nil for a delete) and its version.
struct MemtableEntry: Sendable, Equatable {
    var version: UInt64
    var value: [UInt8]?
}

/// The committed changes not yet in the tree.
final class Memtable: @unchecked Sendable {
    // @unchecked: the writer-only state (`writerOnly`, `finger`) is touched only by the
    // single writer (see the header); shared state is atomic or immutable once linked.
    static let maxHeight = 12
    /// Bytes of a node before its links: version, value length, key length, height.
    static let nodeHeaderBytes = 16

    private let head: MemtableNode
    /// The arena and the height generator's state. Behind a pointer: each access to a
    /// class's stored `var` costs a dynamic exclusivity check, measurable per inserted key.
    private let writerOnly: UnsafeMutablePointer<(arena: MemtableArena, random: UInt64)>
    /// Predecessors of the last inserted key at each level (a sorted run continues from them).
    private let finger: UnsafeMutablePointer<MemtableNode>
    private let index: MemtableIndex
    private let filter: MemtableFilter
    private let levels = ManagedAtomic(1)
    private let nodeCount = ManagedAtomic(0)
    private let nodeBytes = ManagedAtomic(0)
    /// Whether its hash index and filter were backed with memory when made.
    let isPopulated: Bool

    /// An empty memtable expected to grow to about `budgetBytes` (sizes its hash index).
    /// `populated` backs its hash index and filter with memory at once: for the memtable a
    /// checkpoint starts under a stream of writes, whose first batches would otherwise take
    /// a page fault per key (random slots of an 8 MiB index), milliseconds in which every
    /// commit waits for its batch to be linked. A store's first memtable is left sparse.
    init(budgetBytes: Int = 1 << 20, populated: Bool = false) {
        isPopulated = populated
        index = MemtableIndex(budgetBytes: budgetBytes, populated: populated)
        filter = MemtableFilter(words: index.slotCount / 8, populated: populated)
        let size = Self.nodeHeaderBytes + 8 * Self.maxHeight
        writerOnly = .allocate(capacity: 1)
        writerOnly.initialize(to: (MemtableArena(), 0x2545_F491_4F6C_DD1D))
        head = MemtableNode.make(at: writerOnly.pointee.arena.allocate(size), height: Self.maxHeight, version: 0, key: UnsafeRawBufferPointer(start: nil, count: 0),
                                 value: nil)
        finger = .allocate(capacity: Self.maxHeight)
        finger.initialize(repeating: head, count: Self.maxHeight)
    }

    deinit {
        index.deallocate()
        filter.deallocate()
        finger.deallocate()
        writerOnly.pointee.arena.deallocateAll()
        writerOnly.deinitialize(count: 1)
        writerOnly.deallocate()
    }

    /// Changes held (every version of a key counts).
    var count: Int { nodeCount.load(ordering: .relaxed) }

    /// Bytes the changes take (nodes with keys and values, linked or not), for the
    /// checkpoint trigger.
    var byteCount: Int { nodeBytes.load(ordering: .relaxed) }

    var isEmpty: Bool { count == 0 }

    /// The newest change of `key` at or below `version`, if any: the filter, then a hash
    /// probe, or O(log n) through the skip list once the index is full.
    func entry(_ key: [UInt8], at version: UInt64 = .max) -> MemtableEntry? {
        key.withUnsafeBytes { key in
            guard let node = newestNode(key, at: version) else { return nil }
            return node.entry
        }
    }

    /// The newest node of `key` at or below `version`, if any.
    @inline(__always)
    func newestNode(_ key: UnsafeRawBufferPointer, at version: UInt64) -> MemtableNode? {
        let hash = hashKey(key)
        // The index slot loads while the filter is checked, not after it: a key the
        // memtable holds waits for one of the two misses instead of both in turn.
        index.prefetch(hash)
        // Every key inserted set its filter bits (MemtableIndex.F1).
        guard filter.mayContain(hash) else { return nil }
        // A complete index names the newest node of every key (MemtableIndex.X1); once it filled up, the
        // skip list answers.
        var node = index.isComplete ? index.newest(key, hash: hash) : firstNode(atLeast: key)
        while let current = node, current.compare(with: key) == 0 {
            if current.version <= version { return current }
            node = current.next(0)
        }
        return nil
    }

    /// Adds every operation of `batch` at `version`; the last operation of a key wins.
    /// `version` must be above every version held (Memtable.K3). Writer only.
    func apply(_ batch: WALBatch, version: UInt64) {
        apply(batch.encoding(), version: version)
    }

    /// Adds every operation of an encoded batch at `version`, reading each key and value
    /// where it lies in the encoding (a copy of a `WALBatch.Operation` retains and
    /// releases its arrays, atomically, while the committing thread releases them too);
    /// the last operation of a key wins. `version` must be above every version held (Memtable.K3).
    /// Writer only.
    func apply(_ batch: WALBatch.Encoding, version: UInt64) {
        let locations = batch.operationLocations
        guard !locations.isEmpty else { return }
        batch.bytes.withUnsafeBytes { bytes in
            locations.withUnsafeBufferPointer { locations in
                func key(_ index: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[locations[index].key]) }
                func value(_ index: Int) -> UnsafeRawBufferPointer? {
                    locations[index].value.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) }
                }
                if locations.count == 1 {
                    insert(key(0), version: version, value: value(0), continuingRun: false)
                    return
                }
                // Sorted, a batch goes in as one run: each key continues from the previous
                // one's place instead of searching from the top (a sequential batch costs
                // O(1) per key).
                let order = positionsInKeyOrder(count: locations.count, key)
                // The last operation of each key wins; earlier ones are skipped.
                let winners = order.indices.filter { position in
                    position + 1 == order.count || compareBytes(key(order[position]), key(order[position + 1])) != 0
                }.map { order[$0] }
                let keys = winners.map(key)
                if let last = lastNode(below: nil), last.compare(with: keys[0]) >= 0 {
                    insert(sorted: keys, version: version) { position, link in link(value(winners[position])) }
                } else {
                    // Every key goes after the last one held (sequential writes): each
                    // continues from the previous one's place, O(1) per key, no search.
                    // The filter words and index slots are the random accesses left,
                    // loaded a few keys ahead.
                    for key in keys.prefix(Self.prefetchDistance) { prefetch(key) }
                    for (position, index) in winners.enumerated() {
                        if position + Self.prefetchDistance < keys.count { prefetch(keys[position + Self.prefetchDistance]) }
                        insert(keys[position], version: version, value: value(index), continuingRun: position > 0)
                    }
                }
            }
        }
    }

    /// Adds `entries`, sorted by key with no key twice, each at its own version. Writer only.
    func insert(sortedUnique entries: [(key: [UInt8], entry: MemtableEntry)]) {
        for (position, change) in entries.enumerated() {
            change.key.withUnsafeBytes { key in
                change.entry.value.withUnsafeBytesIfPresent { value in
                    insert(sortedUniqueCount: 1, continuing: position > 0) { _ in (key, change.entry.version, value) }
                }
            }
        }
    }

    /// Adds `count` changes, sorted by key with no key twice, each at its own version,
    /// change `i` being `change(i)` (recovery's replay). Writer only. Such a memtable gets
    /// no hash index: building it costs as much as the replay itself (a random slot per
    /// key), so lookups search the skip list until the next checkpoint starts a fresh
    /// memtable. With `continuing`, the first key follows the last one this call's caller
    /// inserted before.
    func insert(sortedUniqueCount count: Int, continuing: Bool = false,
                _ change: (Int) -> (key: UnsafeRawBufferPointer, version: UInt64, value: UnsafeRawBufferPointer?)) {
        guard count > 0 else { return }
        index.abandon()
        for position in 0..<count {
            // The filter's words are random accesses: start loading one a few keys ahead.
            if position + Self.prefetchDistance < count { prefetch(change(position + Self.prefetchDistance).key) }
            let (key, version, value) = change(position)
            link(makeNode(key, version: version, value: value), continuingRun: continuing || position > 0)
        }
    }

    /// A node for a change, made but not linked: recovery makes one per replayed change as
    /// it reads the log (the change's bytes copied once, straight into the arena), then
    /// links the last change of each key with `link(sortedUniqueCount:_:)`. A node never
    /// linked is invisible and freed with the memtable. Writer only.
    func makeNode(_ key: UnsafeRawBufferPointer, version: UInt64, value: UnsafeRawBufferPointer?, height: Int? = nil) -> MemtableNode {
        // The engine checks every key and value against `Limits` before it gets here (commits
        // and replayed batches alike); the node's length fields hold those limits.
        precondition(key.count <= Int(UInt16.max) && (value?.count ?? 0) <= Int(Int32.max), "a change beyond the engine's limits")
        let height = height ?? randomHeight()
        let size = Self.nodeHeaderBytes + 8 * height + key.count + (value?.count ?? 0)
        // Counted when made: a node recovery never links still holds its bytes.
        nodeBytes.wrappingIncrement(by: size, ordering: .relaxed)
        return MemtableNode.make(at: writerOnly.pointee.arena.allocate(size), height: height, version: version, key: key, value: value)
    }

    /// Links `count` nodes made by `makeNode` and not linked yet, in key order with no key
    /// twice, node `i` being `node(i)`, as one run (recovery's replay; no hash index, as
    /// for `insert(sortedUniqueCount:)`). Writer only.
    func link(sortedUniqueCount count: Int, _ node: (Int) -> MemtableNode) {
        guard count > 0 else { return }
        index.abandon()
        for position in 0..<count {
            // The nodes lie wherever the log put them: start loading one a few places ahead,
            // and the filter word of a nearer one.
            if position + 2 * Self.prefetchDistance < count { cplatform_prefetch(node(position + 2 * Self.prefetchDistance).base) }
            if position + Self.prefetchDistance < count { prefetch(node(position + Self.prefetchDistance).key) }
            link(node(position), continuingRun: position > 0)
        }
    }

    /// Adds one change. Writer only.
    func insert(_ key: [UInt8], _ entry: MemtableEntry) {
        key.withUnsafeBytes { key in
            entry.value.withUnsafeBytesIfPresent { value in insert(key, version: entry.version, value: value, continuingRun: false) }
        }
    }

    /// Changes in key order from the first key at or above `start` (forward) or at or
    /// below it (reverse), nil starting at the end: for each key its newest change at or
    /// below `version`. O(log n) to start; forward steps O(1), reverse steps O(log n).
    func entries(from start: [UInt8]?, reverse: Bool, at version: UInt64 = .max) -> MemtableIterator {
        var node: MemtableNode?
        if let start {
            node = start.withUnsafeBytes { start in
                let atLeast = firstNode(atLeast: start)
                guard reverse else { return atLeast }
                if let atLeast, atLeast.compare(with: start) == 0 { return atLeast }
                return lastNode(below: start)
            }
        } else {
            node = reverse ? lastNode(below: nil) : head.next(0)
        }
        return MemtableIterator(memtable: self, node: node, version: version, reverse: reverse)
    }

    /// How many keys of `range` have a value (their newest change at or below `version` is
    /// not a delete), counting no further than `limit`: a forward walk that reads ahead and
    /// reads node headers, not keys (`MemtableIterator.countValues`).
    func count(_ range: KeyRange, at version: UInt64, limit: Int) -> Int {
        var iterator = entries(from: range.lower, reverse: false, at: version)
        return range.upper.withUnsafeBytesIfPresent { iterator.countValues(below: $0, limit: limit) }
    }

    /// Checks Memtable.K1 at every level, Memtable.K4 and the node count (tests only: O(n)).
    func checkInvariants() -> Bool {
        var nodes = 0
        for level in 0..<Self.maxHeight {
            var previous: MemtableNode?
            var node = head.next(level)
            while let current = node {
                guard current.height > level else { return false }
                if let previous {
                    let order = previous.compare(with: current.key)
                    guard order < 0 || (order == 0 && previous.version > current.version) else { return false }
                    guard level > 0 || previous.olderFollows == (order == 0) else { return false }
                }
                if level == 0 { nodes += 1 }
                previous = current
                node = current.next(level)
            }
            if level == 0, let previous, previous.olderFollows { return false }
        }
        return nodes == count
    }

    // MARK: Search

    /// The first node whose key is ≥ `key` (the newest change of `key` when it has one).
    func firstNode(atLeast key: UnsafeRawBufferPointer) -> MemtableNode? {
        var node = head
        var level = levels.load(ordering: .relaxed) - 1
        while true {
            if let next = node.next(level), next.compare(with: key) < 0 {
                node = next
            } else if level == 0 {
                return node.next(0)
            } else {
                level -= 1
            }
        }
    }

    /// The last node whose key is < `key` (the last of all when `key` is nil).
    func lastNode(below key: UnsafeRawBufferPointer?) -> MemtableNode? {
        var node = head
        var level = levels.load(ordering: .relaxed) - 1
        while true {
            if let next = node.next(level), key.map({ next.compare(with: $0) < 0 }) ?? true {
                node = next
            } else if level == 0 {
                return node == head ? nil : node
            } else {
                level -= 1
            }
        }
    }

    // MARK: Insertion (writer only)

    /// Keys searched at once by `insert(sorted:version:withValue:)`. Measured at 1M keys
    /// (Benchmarks/JOURNAL.md): 16 beat 8 by 8–16 % on fillrandom and 15–33 % on
    /// deleterandom; 32 was no better than 16 and slower on deleterandom.
    private static let searchLanes = 16
    /// Keys per round of searching and linking (bounds the predecessor table).
    private static let roundKeys = 256

    /// Inserts `keys` (sorted, no key twice) at `version`, the value of key `i` handed by
    /// `withValue(i, body)` to `body` (nil for a delete), borrowed. In a memtable
    /// larger than the caches each step of a skip-list search is a cache miss, one after
    /// another; here a round of keys is first searched `searchLanes` at a time, each lane's
    /// next node prefetched while the other lanes step, so the misses overlap. The
    /// predecessors found are then linked in key order, each corrected for the nodes this
    /// round inserted before it (a step forward from the later of the two).
    private func insert(sorted keys: [UnsafeRawBufferPointer], version: UInt64,
                        withValue: (Int, (UnsafeRawBufferPointer?) -> Void) -> Void) {
        let height = Self.maxHeight
        let predecessors = UnsafeMutablePointer<MemtableNode>.allocate(capacity: Self.roundKeys * height)
        defer { predecessors.deallocate() }
        var start = 0
        while start < keys.count {
            let end = min(keys.count, start + Self.roundKeys)
            let top = levels.load(ordering: .relaxed) - 1
            // The round's filter words and index slots load while the search runs.
            for index in start..<end { prefetch(keys[index]) }
            search(keys[start..<end], top: top, into: predecessors)
            // Link in key order. `finger[level]` is the node this round last linked at `level`
            // (or a found predecessor before it): the later of it and the found predecessor
            // precedes the key.
            for level in 0..<height { finger[level] = head }
            for index in start..<end {
                let key = keys[index]
                let found = predecessors + (index - start) * height
                let nodeHeight = randomHeight()
                if nodeHeight > levels.load(ordering: .relaxed) { levels.store(nodeHeight, ordering: .relaxed) }
                for level in 0..<nodeHeight {
                    var predecessor = level <= top ? found[level] : head
                    let linked = finger[level]
                    if linked != head && (predecessor == head || linked.compare(with: predecessor.key) > 0) { predecessor = linked }
                    while let next = predecessor.next(level), next.compare(with: key) < 0 { predecessor = next }
                    finger[level] = predecessor
                }
                withValue(index) { linkAfterFinger(makeNode(key, version: version, value: $0, height: nodeHeight)) }
            }
            start = end
        }
        // `finger` now holds the last key's predecessors at its levels only: a later
        // continuing run must not start from it.
        for level in 0..<height { finger[level] = head }
    }

    /// Finds, for each key, its predecessor at every level up to `top` in the list as it
    /// stands (the last node whose key is below it), into `predecessors` (`maxHeight` per
    /// key), running `searchLanes` searches interleaved.
    private func search(_ keys: ArraySlice<UnsafeRawBufferPointer>, top: Int, into predecessors: UnsafeMutablePointer<MemtableNode>) {
        struct Lane {
            var key = -1
            var node: MemtableNode
            var level = 0
            var candidate: MemtableNode?
        }
        keys.withUnsafeBufferPointer { keys in
            // The lanes in a stack buffer: the loop touches them every step, and an array's
            // bounds and uniqueness checks on each were a visible share of the search.
            withUnsafeTemporaryAllocation(of: Lane.self, capacity: Self.searchLanes) { lanes in
                var nextKey = 0
                var running = 0
                func begin(_ lane: UnsafeMutablePointer<Lane>) {
                    guard nextKey < keys.count else {
                        lane.initialize(to: Lane(key: -1, node: head))
                        return
                    }
                    let candidate = head.next(top)
                    lane.initialize(to: Lane(key: nextKey, node: head, level: top, candidate: candidate))
                    nextKey += 1
                    running += 1
                    if let candidate { cplatform_prefetch(candidate.base) }
                }
                let base = lanes.baseAddress!
                for index in 0..<Self.searchLanes { begin(base + index) }
                while running > 0 {
                    for index in 0..<Self.searchLanes {
                        let lane = base + index
                        guard lane.pointee.key >= 0 else { continue }
                        let key = keys[lane.pointee.key]
                        if let candidate = lane.pointee.candidate, candidate.compare(with: key) < 0 {
                            lane.pointee.node = candidate
                        } else {
                            predecessors[lane.pointee.key * Self.maxHeight + lane.pointee.level] = lane.pointee.node
                            if lane.pointee.level == 0 {
                                running -= 1
                                begin(lane)
                                continue
                            }
                            lane.pointee.level -= 1
                        }
                        let next = lane.pointee.node.next(lane.pointee.level)
                        lane.pointee.candidate = next
                        if let next { cplatform_prefetch(next.base) }
                    }
                }
            }
        }
    }

    private func insert(_ key: UnsafeRawBufferPointer, version: UInt64, value: UnsafeRawBufferPointer?, continuingRun: Bool) {
        link(makeNode(key, version: version, value: value), continuingRun: continuingRun)
    }

    /// Links `inserted` (made, not linked) at its key's place: after a smaller key linked
    /// just before when `continuingRun`, else searched from the top.
    private func link(_ inserted: MemtableNode, continuingRun: Bool) {
        let key = inserted.key
        let top = levels.load(ordering: .relaxed) - 1
        var level = top
        if continuingRun {
            // `finger` holds the predecessors of a smaller key: climb while the gap to
            // `key` spans the next node, then search down from there.
            level = 0
            while level < top, let next = finger[level].next(level), next.compare(with: key) < 0 { level += 1 }
        } else {
            finger[top] = head
        }
        var node = finger[level]
        while true {
            while let next = node.next(level), next.compare(with: key) < 0 { node = next }
            finger[level] = node
            if level == 0 { break }
            level -= 1
        }
        let height = inserted.height
        if height > top + 1 {
            for level in (top + 1)..<height { finger[level] = head }
            levels.store(height, ordering: .relaxed)
        }
        linkAfterFinger(inserted)
    }

    /// Links `inserted` after `finger[level]` at each of its levels (its predecessors
    /// there), leaving `finger` at it.
    private func linkAfterFinger(_ inserted: MemtableNode) {
        let key = inserted.key
        let height = inserted.height
        // Memtable.K4: the node it goes before is an older change of its key, or of another key.
        if let older = finger[0].next(0), equalBytes(older.key, key) { inserted.base.storeBytes(of: UInt8(1), toByteOffset: 15, as: UInt8.self) }
        for level in 0..<height {
            inserted.link(level).store(finger[level].link(level).load(ordering: .relaxed), ordering: .relaxed)
        }
        for level in 0..<height {
            finger[level].link(level).store(inserted.bits, ordering: .releasing)
            finger[level] = inserted
        }
        let hash = hashKey(key)
        filter.add(hash)
        index.record(inserted, hash: hash)
        nodeCount.wrappingIncrement(ordering: .relaxed)
    }

    /// How many keys ahead a run of inserts prefetches the filter and index lines.
    static let prefetchDistance = 16

    /// Starts loading the filter word and the index slot `key` will touch when linked or
    /// looked up.
    @inline(__always)
    func prefetch(_ key: UnsafeRawBufferPointer) {
        let hash = hashKey(key)
        filter.prefetch(hash)
        index.prefetch(hash)
    }

    /// 1 with probability 3/4, 2 with 3/16, … (branching factor 4), at most `maxHeight`.
    private func randomHeight() -> Int {
        var bits = writerOnly.pointee.random
        bits ^= bits << 13
        bits ^= bits >> 7
        bits ^= bits << 17
        writerOnly.pointee.random = bits
        var height = 1
        while height < Self.maxHeight && bits & 3 == 0 {
            height += 1
            bits >>= 2
        }
        return height
    }
}

/// A node of the memtable's skip list (layout in Memtable.swift's header): a pointer into
/// the arena, valid while the memtable lives.
struct MemtableNode: Equatable {
    let base: UnsafeMutableRawPointer

    init(_ base: UnsafeMutableRawPointer) { self.base = base }

    static func make(at base: UnsafeMutableRawPointer, height: Int, version: UInt64, key: UnsafeRawBufferPointer,
                     value: UnsafeRawBufferPointer?) -> MemtableNode {
        base.storeBytes(of: version, as: UInt64.self)
        base.storeBytes(of: Int32(value.map(\.count) ?? -1), toByteOffset: 8, as: Int32.self)
        base.storeBytes(of: UInt16(key.count), toByteOffset: 12, as: UInt16.self)
        base.storeBytes(of: UInt8(height), toByteOffset: 14, as: UInt8.self)
        base.storeBytes(of: UInt8(0), toByteOffset: 15, as: UInt8.self)
        (base + 16).initializeMemory(as: Int.AtomicRepresentation.self, repeating: .init(0), count: height)
        let keyStart = base + 16 + 8 * height
        if let address = key.baseAddress { keyStart.copyMemory(from: address, byteCount: key.count) }
        if let value, let address = value.baseAddress { (keyStart + key.count).copyMemory(from: address, byteCount: value.count) }
        return MemtableNode(base)
    }

    var bits: Int { Int(bitPattern: base) }
    var version: UInt64 { base.load(as: UInt64.self) }
    var height: Int { Int(base.load(fromByteOffset: 14, as: UInt8.self)) }
    /// Whether the next node at level 0 is an older change of this node's key (Memtable.K4).
    var olderFollows: Bool { base.load(fromByteOffset: 15, as: UInt8.self) & 1 != 0 }
    /// Whether this node is a delete, known from its header alone.
    var isDelete: Bool { valueCount < 0 }

    /// Whether a count at `version` counts this node, `hidden` saying whether the node before
    /// it was a visible change of its key (a delete included), which hides it; `hidden` is
    /// then set for the node after it. Read from the header alone (Memtable.K4; MemtableLookahead.C1 of
    /// MemtableLookahead.swift).
    @inline(__always)
    func counts(at version: UInt64, hidden: inout Bool) -> Bool {
        let visible = self.version <= version
        defer { hidden = visible && olderFollows }
        return visible && !hidden && !isDelete
    }
    private var keyCount: Int { Int(base.load(fromByteOffset: 12, as: UInt16.self)) }
    private var valueCount: Int32 { base.load(fromByteOffset: 8, as: Int32.self) }

    var key: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base + 16 + 8 * height, count: keyCount) }

    /// The value's bytes, or nil for a delete.
    var value: UnsafeRawBufferPointer? {
        let count = valueCount
        guard count >= 0 else { return nil }
        return UnsafeRawBufferPointer(start: base + 16 + 8 * height + keyCount, count: Int(count))
    }

    var entry: MemtableEntry { MemtableEntry(version: version, value: value.map { Array($0) }) }

    func link(_ level: Int) -> UnsafeAtomic<Int> {
        UnsafeAtomic(at: (base + 16 + 8 * level).assumingMemoryBound(to: Int.AtomicRepresentation.self))
    }

    func next(_ level: Int) -> MemtableNode? {
        UnsafeMutableRawPointer(bitPattern: link(level).load(ordering: .acquiring)).map(MemtableNode.init)
    }

    /// Compares this node's key with `key` (negative when the node's is smaller).
    @inline(__always)
    func compare(with key: UnsafeRawBufferPointer) -> Int { compareBytes(self.key, key) }
}

/// A walk over a memtable as of one version (see `Memtable.entries`); it keeps the
/// memtable, and so its nodes, alive. A forward walk that goes on past its first few
/// nodes reads ahead (MemtableLookahead.swift).
struct MemtableIterator: IteratorProtocol {
    private let memtable: Memtable
    /// Forward: the first node of the next key to visit. Reverse: a node of it.
    private var node: MemtableNode?
    private let version: UInt64
    private let reverse: Bool
    /// Forward: the read-ahead, once the walk has gone `lookaheadAfter` nodes, and the walk's
    /// place in its batch (kept here: the next node costs no access to the read-ahead).
    private var lookahead: MemtableLookahead?
    private var batch: UnsafeMutablePointer<MemtableNode>?
    private var batchCount = 0
    private var batchPosition = 0
    /// Forward: the first `lookaheadAfter` steps counted, and how many of them went further
    /// than `nearbyBytes` in the arena (-1 once they were too few for reading ahead).
    private var stepped = 0
    private var farSteps = 0
    /// Batches read so far, and for the last one checked against a bound
    /// (`handedOut(before:)`), how many of its first nodes come before it.
    private var batches = 0
    private var checked: (batch: Int, before: Int) = (0, 0)
    /// Nodes a forward walk follows one by one before it reads ahead: a point lookup
    /// through an index, a walk of one or two nodes, allocates nothing.
    static let lookaheadAfter = 4
    /// A step to a node this close lands where the processor's own prefetching already
    /// reads: keys written in order lie in the arena in order, and a walk over them that
    /// read ahead ran slower (readseq 31.5M, 35.7M -> 26.9M, 22.2M keys/s). The walk reads
    /// ahead only when at least half its steps went further.
    static let nearbyBytes = 4_096

    init(memtable: Memtable, node: MemtableNode?, version: UInt64, reverse: Bool) {
        self.memtable = memtable
        self.node = node
        self.version = version
        self.reverse = reverse
    }

    mutating func next() -> (key: [UInt8], value: MemtableEntry)? {
        guard let node = nextNode() else { return nil }
        return (Array(node.key), node.entry)
    }

    /// The next key's newest change at or below the iterator's version (a delete
    /// included), read in place: valid while the memtable lives.
    mutating func nextNode() -> MemtableNode? {
        while let current = node {
            var visible: MemtableNode?
            if reverse {
                let key = current.key
                // From the newest change of this key; then to the key before it.
                var candidate = memtable.firstNode(atLeast: key)
                while let change = candidate, change.compare(with: key) == 0 {
                    if change.version <= version { visible = change; break }
                    candidate = change.next(0)
                }
                node = memtable.lastNode(below: key)
            } else {
                // The key's older changes follow it while each says so (Memtable.K4).
                var last = current
                var candidate = successor(of: current)
                visible = current.version <= version ? current : nil
                while last.olderFollows, let change = candidate {
                    if visible == nil && change.version <= version { visible = change }
                    last = change
                    candidate = successor(of: change)
                }
                node = candidate
            }
            if let visible { return visible }
        }
        return nil
    }

    /// The node after `node` at level 0, `node` being the last one this walk stepped to.
    @inline(__always)
    private mutating func successor(of node: MemtableNode) -> MemtableNode? {
        if batchPosition < batchCount {
            defer { batchPosition += 1 }
            return batch.unsafelyUnwrapped[batchPosition]
        }
        if lookahead != nil { return nextBatch() }
        let next = node.next(0)
        // Past `lookaheadAfter` steps a walk that stayed nearby never reads ahead (`stepped`
        // stops counting: one comparison a step).
        guard stepped < Self.lookaheadAfter || farSteps >= 0, let next else { return next }
        return step(from: node, to: next)
    }

    /// Counts the step from `node` to `next` and, once the walk has gone far enough and
    /// mostly far in the arena, starts reading ahead at `next` (a node of height 2 or more).
    private mutating func step(from node: MemtableNode, to next: MemtableNode) -> MemtableNode? {
        guard readsAhead(from: node, to: next) else { return next }
        lookahead = MemtableLookahead(at: next)
        batch = lookahead.unsafelyUnwrapped.batch
        return nextBatch()
    }

    /// Counts the step from `node` to `next`; true when the walk should read ahead from
    /// `next`: it has gone `lookaheadAfter` steps, mostly far in the arena, and `next` (a
    /// node of height 2 or more) starts a segment.
    private mutating func readsAhead(from node: MemtableNode, to next: MemtableNode) -> Bool {
        if stepped < Self.lookaheadAfter {
            stepped += 1
            if abs(next.bits &- node.bits) > Self.nearbyBytes { farSteps += 1 }
            guard stepped == Self.lookaheadAfter else { return false }
            // Decided: a walk that stayed nearby goes on by the links alone.
            if 2 * farSteps < stepped { farSteps = -1 }
        }
        // Segments begin at nodes of height 2 or more (MemtableLookahead.swift).
        return farSteps >= 0 && next.height >= 2
    }

    /// The first node of the read-ahead's next batch.
    private mutating func nextBatch() -> MemtableNode? {
        // A copy of this walk shares the read-ahead: the first of the two to need another
        // batch takes a read-ahead of its own, so that the other's batch stays as it is.
        if !isKnownUniquelyReferenced(&lookahead) {
            lookahead = MemtableLookahead(copying: lookahead.unsafelyUnwrapped)
            batch = lookahead.unsafelyUnwrapped.batch
        }
        batchCount = lookahead.unsafelyUnwrapped.fill()
        batches += 1
        batchPosition = 0
        guard batchCount > 0 else { return nil }
        batchPosition = 1
        return batch.unsafelyUnwrapped[0]
    }

    /// Whether the node `nextNode` returned last comes before `bound`, known without
    /// comparing its key: the walk took a node after it from the read-ahead batch (the
    /// first node of the next key, `node`), and that node lies among the batch's first
    /// nodes that come before `bound`, found once a batch by a binary search (the batch is
    /// in key order, MemtableLookahead.L1). `bound` must be the same on every
    /// call. False when the walk does not read ahead (yet): the caller compares.
    @inline(__always)
    mutating func handedOut(before bound: UnsafeRawBufferPointer) -> Bool {
        guard batchCount > 0 else { return false }
        if checked.batch != batches { checked = (batches, batchNodes(before: bound)) }
        return batchPosition - 1 < checked.before
    }

    /// How many of the current batch's first nodes come before `bound`.
    private func batchNodes(before bound: UnsafeRawBufferPointer) -> Int {
        let batch = batch.unsafelyUnwrapped
        var (low, high) = (0, batchCount)
        while low < high {
            let middle = (low + high) / 2
            if compareBytes(batch[middle].key, bound) < 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// How many keys from the walk's place on, below `upper` (nil: to the end), have a
    /// value at the walk's version (the change visible there is not a delete), counting no
    /// further than `limit`. It reads each node's header (its version, whether it is a
    /// delete, whether an older change of its key follows it: Memtable.K4), and keys only to find
    /// `upper`: node by node while the walk would not read ahead, then segments side by
    /// side (`MemtableLookahead.countValues`). Forward walks only; it spends the walk.
    mutating func countValues(below upper: UnsafeRawBufferPointer?, limit: Int) -> Int {
        precondition(!reverse && lookahead == nil, "a count walks forward from its start")
        var count = 0
        // Whether the node before was a visible change of the next node's key (`counts`).
        var hidden = false
        var current = node
        node = nil
        while let this = current {
            if let upper, compareBytes(this.key, upper) >= 0 { return count }
            if count == limit { return count }
            if this.counts(at: version, hidden: &hidden) { count += 1 }
            guard let next = this.next(0) else { return count }
            if (stepped < Self.lookaheadAfter || farSteps >= 0) && readsAhead(from: this, to: next) {
                return count + MemtableLookahead.countValues(from: next, hidden: hidden, below: upper, at: version,
                                                             limit: limit - count)
            }
            current = next
        }
        return count
    }

    /// Whether the walk reads ahead (tests).
    var readsAhead: Bool { lookahead != nil }
}

extension Optional where Wrapped == [UInt8] {
    /// Calls `body` with the array's bytes, or with nil.
    func withUnsafeBytesIfPresent<Result>(_ body: (UnsafeRawBufferPointer?) throws -> Result) rethrows -> Result {
        switch self {
        case let .some(array): try array.withUnsafeBytes { try body($0) }
        case .none: try body(nil)
        }
    }
}
