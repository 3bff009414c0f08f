// The memtable: committed changes not yet folded into the B+tree, as a skip list laid out
// in an arena (MemtableArena.swift), LevelDB style. Every change is a node of its own
// carrying its commit version, so a reader at version V sees, for each key, the newest
// node at or below V: a snapshot of the memtable is just a version number. Readers take
// no lock; the single writer links new nodes in and never changes or frees a published
// one; dropping the memtable frees its blocks. No node is reference counted.
//
// A node's layout is MemtableNode.swift's.
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
//  Memtable.K5. A node whose value lies in place (outside the arena) points into a value array
//      the memtable keeps until it is freed itself, as it keeps its arena: the array is
//      never changed (a copy of an array it holds is changed only after a copy of its
//      elements), so its elements stay where they were when the node was made, and every
//      reader of the node holds the memtable. It keeps no other array of the batch, and
//      the node's bytes count the value's (`byteCount`).
//  A memtable that defers linking (a read-only store's, beside a writer in another process:
//  Memtable+Deferred.swift) names new nodes in its hash index before they are in the skip
//  list, and links them there before any walk in key order; Memtable.D1–D3 say how.
// Thread-safety: `insert`/`apply` only from one thread at a time (the engine's applier,
// or recovery before the memtable is shared); every other member from any thread.
import Atomics
import CStrataPlatform
import StrataWAL
import Synchronization
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

#if DEBUG
/// A memtable invariant found broken by `Memtable._checkInvariants()`.
struct MemtableInvariantViolation: Error, CustomStringConvertible {
    let invariant: String
    let detail: String
    var description: String { "\(invariant) broken: \(detail)" }
}
#endif

/// The committed changes not yet in the tree.
final class Memtable: @unchecked Sendable {
    // @unchecked: the writer-only state (`writerOnly`, `finger`) is touched only by the
    // single writer (see the header); shared state is atomic or immutable once linked.
    static let maxHeight = 12

    let head: MemtableNode
    /// The arena, the height generator's state and the value arrays nodes point at in
    /// place (Memtable.K5). Behind a pointer: each access to a class's stored `var` costs a
    /// dynamic exclusivity check, measurable per inserted key.
    let writerOnly: UnsafeMutablePointer<(arena: MemtableArena, random: UInt64, kept: [[UInt8]])>
    /// The arena's next block, made ready while it fills; given back when the memtable is
    /// frozen (`releaseSpareBlock()`).
    private let spareBlock = SpareBlock()
    /// Predecessors of the last inserted key at each level (a sorted run continues from them).
    let finger: UnsafeMutablePointer<MemtableNode>
    let index: MemtableIndex
    let filter: MemtableFilter
    // Atomics held inline (`Synchronization.Atomic`), not in objects of their own: every
    // lookup's `isEmpty` retained and released a `ManagedAtomic`, an atomic write to one
    // line that readers on every CPU shared (ycsb-c, 2 threads).
    let levels = Atomic(1)
    /// Whether a change was ever added (a memtable only grows): what every lookup asks
    /// first, written once, on lines apart from the counters each insert writes.
    private let holdsChanges = Atomic(false)
    /// Whether its hash index and filter were backed with memory when made.
    let isPopulated: Bool
    /// Whether `apply` leaves new nodes out of the skip list (Memtable+Deferred.swift):
    /// set when made for a reader, cleared for good once its index can take no more keys.
    let defersLinking: Atomic<Bool>
    private let padding = CacheLinePadding()
    private let nodeCount = Atomic(0)
    private let nodeBytes = Atomic(0)
    // Written by readers (`noteQuietSeek()`), on lines apart from the writer's counters.
    private let seekPadding = CacheLinePadding()
    /// The change count when the current streak of seeks with no change between them
    /// began, and how many seeks that streak holds.
    private let quietSince = Atomic(-1)
    private let quietSeeks = Atomic(0)
    /// Whether a seek took this memtable's quiet streak to start a checkpoint.
    private let quietClaimed = Atomic(false)
    private let quietPadding = CacheLinePadding()
    /// The nodes named by the index but not linked yet, in the order made, and how many.
    let unlinked = Mutex<[MemtableNode]>([])
    let unlinkedCount = Atomic(0)

    /// An empty memtable expected to grow to about `budgetBytes` (sizes its hash index).
    /// `populated` backs its hash index and filter with memory at once: for the memtable a
    /// checkpoint starts under a stream of writes, whose first batches would otherwise take
    /// a page fault per key (random slots of an 8 MiB index), milliseconds in which every
    /// commit waits for its batch to be linked. A store's first memtable is left sparse.
    ///
    /// `defersLinking`: the memtable of a read-only store that follows a writer, whose
    /// batches it replays as they come but mostly reads by key (Memtable+Deferred.swift).
    init(budgetBytes: Int = 1 << 20, populated: Bool = false, defersLinking: Bool = false) {
        isPopulated = populated
        self.defersLinking = Atomic(defersLinking)
        index = MemtableIndex(budgetBytes: budgetBytes, populated: populated)
        filter = MemtableFilter(words: index.slotCount / 8, populated: populated)
        let size = MemtableNode.byteCount(height: Self.maxHeight, key: 0, value: 0)
        writerOnly = .allocate(capacity: 1)
        writerOnly.initialize(to: (MemtableArena(blockLimit: MemtableArena.blockLimit(forBudget: budgetBytes), spare: spareBlock),
                                   0x2545_F491_4F6C_DD1D, []))
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

    /// Frees the block made ready for the arena's next one, and stops it making more: for a
    /// memtable just frozen, which takes at most the few batches in flight at the freeze
    /// (blocks the arena then maps itself). Until its checkpoint ended, a frozen memtable
    /// held a block of up to 2 MiB it would never fill. From any thread.
    func releaseSpareBlock() { spareBlock.abandon() }

    /// Whether `releaseSpareBlock()` was called.
    var releasedSpareBlock: Bool { spareBlock.isAbandoned }

    /// Changes held (every version of a key counts).
    var count: Int { nodeCount.load(ordering: .relaxed) }

    /// Bytes the changes take (nodes with keys and values, linked or not), for the
    /// checkpoint trigger.
    var byteCount: Int { nodeBytes.load(ordering: .relaxed) }

    var isEmpty: Bool { !holdsChanges.load(ordering: .relaxed) }

    /// Counts a seek (a walk from a key) that read this memtable, and returns whether it
    /// is at least the `streak`th seek in a row with no change added since the first of
    /// them. Past the streak a seek only reads the counters (no write to a line every
    /// reader shares). Readers race on the counters; a lost count only delays the answer.
    func noteQuietSeek(streak: Int) -> Bool {
        if quietClaimed.load(ordering: .relaxed) { return false }
        let count = self.count
        guard quietSince.load(ordering: .relaxed) == count else {
            quietSince.store(count, ordering: .relaxed)
            quietSeeks.store(1, ordering: .relaxed)
            return false
        }
        if quietSeeks.load(ordering: .relaxed) >= streak { return true }
        return quietSeeks.wrappingAdd(1, ordering: .relaxed).newValue >= streak
    }

    /// Whether this call is the one that takes the memtable's quiet streak (true once in
    /// its life), after which `noteQuietSeek` answers false.
    func claimQuietStreak() -> Bool {
        quietClaimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
    }

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
        return newestNode(key, hash: hash, at: version)
    }

    /// `newestNode(_:at:)` for a key whose `hashKey` is `hash` and that the filter let
    /// through (`mayHold`).
    @inline(__always)
    func newestNode(_ key: UnsafeRawBufferPointer, hash: UInt64, at version: UInt64) -> MemtableNode? {
        // A complete index names the newest node of every key (MemtableIndex.X1); once it filled up, the
        // skip list answers.
        var node = index.isComplete ? index.newest(key, hash: hash) : firstNode(atLeast: key)
        while let current = node, current.compare(with: key) == 0 {
            if current.version <= version { return current }
            node = current.next(0)
        }
        return nil
    }

    /// The positions of the last operation of each key among `count` operations, in key
    /// order (earlier operations of a key are skipped: the last one wins).
    func lastOperations(count: Int, _ key: (Int) -> UnsafeRawBufferPointer) -> [Int] {
        let order = positionsInKeyOrder(count: count, key)
        return order.indices.filter { position in
            position + 1 == order.count || compareBytes(key(order[position]), key(order[position + 1])) != 0
        }.map { order[$0] }
    }

    /// A node for a change, made but not linked: recovery makes one per replayed change as
    /// it reads the log (the change's bytes copied once, straight into the arena), then
    /// links the last change of each key with `link(sortedUniqueCount:_:)`. A node never
    /// linked is invisible and freed with the memtable. Writer only.
    /// `valueInPlace`: the node points at the value, which the caller has the memtable keep
    /// (Memtable.K5); its bytes still count toward `byteCount`.
    func makeNode(_ key: UnsafeRawBufferPointer, version: UInt64, value: UnsafeRawBufferPointer?, height: Int? = nil,
                  valueInPlace: Bool = false) -> MemtableNode {
        // The engine checks every key and value against `Limits` before it gets here (commits
        // and replayed batches alike); the node's length fields hold those limits.
        precondition(key.count <= Int(UInt16.max) && (value?.count ?? 0) <= Int(Int32.max) - 2, "a change beyond the engine's limits")
        let height = height ?? randomHeight()
        let size = MemtableNode.byteCount(height: height, key: key.count, value: value?.count ?? 0)
        // Counted when made: a node recovery never links still holds its bytes.
        nodeBytes.wrappingAdd(size, ordering: .relaxed)
        let stored = valueInPlace ? MemtableNode.byteCount(height: height, key: key.count, value: MemtableNode.valueAddressBytes) : size
        return MemtableNode.make(at: writerOnly.pointee.arena.allocate(stored), height: height, version: version, key: key,
                                 value: value, valueInPlace: valueInPlace)
    }

    /// Links `count` nodes made by `makeNode` and not linked yet, in key order with no key
    /// twice, node `i` being `node(i)`, as one run (recovery's replay), and names each in
    /// the hash index. Writer only.
    func link(sortedUniqueCount count: Int, _ node: (Int) -> MemtableNode) {
        guard count > 0 else { return }
        for position in 0..<count {
            // The nodes lie wherever the log put them: start loading one a few places ahead,
            // and the filter word and index slot of a nearer one.
            if position + 2 * Self.prefetchDistance < count { cplatform_prefetch(node(position + 2 * Self.prefetchDistance).base) }
            if position + Self.prefetchDistance < count { prefetch(node(position + Self.prefetchDistance).key) }
            link(node(position), continuingRun: position > 0)
        }
    }

    /// Changes in key order from the first key at or above `start` (forward) or at or
    /// below it (reverse), nil starting at the end: for each key its newest change at or
    /// below `version`. O(log n) to start; forward steps O(1), reverse steps O(log n).
    func entries(from start: [UInt8]?, reverse: Bool, at version: UInt64 = .max) -> MemtableIterator {
        linkDeferred()
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

    /// For each key of `memtables` (newest first), its newest change at or below `version`
    /// (a delete included), taken from the first memtable that holds one, in key order and
    /// read in place: valid while the memtables live (a checkpoint's changes).
    static func newestChanges(of memtables: [Memtable], at version: UInt64) -> [MemtableNode] {
        var changes: [MemtableNode] = []
        changes.reserveCapacity(memtables.reduce(0) { $0 + $1.count })
        var iterators = memtables.map { $0.entries(from: nil, reverse: false, at: version) }
        if iterators.count == 1 {
            while let node = iterators[0].nextNode() { changes.append(node) }
            return changes
        }
        var heads = iterators.indices.map { iterators[$0].nextNode() }
        while true {
            // The lowest key; of equal keys, the newest memtable's.
            var lowest: MemtableNode?
            for case let head? in heads where lowest.map({ head.compare(with: $0.key) < 0 }) ?? true { lowest = head }
            guard let lowest else { return changes }
            changes.append(lowest)
            for index in heads.indices where heads[index].map({ $0.compare(with: lowest.key) == 0 }) ?? false {
                heads[index] = iterators[index].nextNode()
            }
        }
    }

    /// How many keys of `range` have a value (their newest change at or below `version` is
    /// not a delete), counting no further than `limit`: a forward walk that reads ahead and
    /// reads node headers, not keys (`MemtableIterator.countValues`).
    func count(_ range: KeyRange, at version: UInt64, limit: Int) -> Int {
        var iterator = entries(from: range.lower, reverse: false, at: version)
        return range.upper.withUnsafeBytesIfPresent { iterator.countValues(below: $0, limit: limit) }
    }

    #if DEBUG
    /// Checks the memtable's invariants, throwing the first one broken: Memtable.K1 at every
    /// level, Memtable.K4, the node count, that no node is taller than the list's levels,
    /// that every key's bits are in the filter (MemtableIndex.F1) and that a complete hash
    /// index names every key's newest node (MemtableIndex.X1). O(n): debug builds only,
    /// for tests, which run it after every step (as swift-collections' `_checkInvariants`).
    /// Writer's thread, or while no writer runs.
    func _checkInvariants() throws(MemtableInvariantViolation) {
        func fail(_ invariant: String, _ detail: String) -> MemtableInvariantViolation {
            MemtableInvariantViolation(invariant: invariant, detail: detail)
        }
        let top = levels.load(ordering: .relaxed)
        var nodes = 0
        for level in 0..<Self.maxHeight {
            var previous: MemtableNode?
            var node = head.next(level)
            guard level < top || node == nil else { throw fail("levels", "a node is linked at level \(level) of \(top)") }
            while let current = node {
                guard current.height > level else { throw fail("heights", "a node of height \(current.height) at level \(level)") }
                if let previous {
                    let order = previous.compare(with: current.key)
                    guard order < 0 || (order == 0 && previous.version > current.version) else {
                        throw fail("Memtable.K1", "at level \(level), version \(previous.version) before \(current.version)")
                    }
                    guard level > 0 || previous.olderFollows == (order == 0) else {
                        throw fail("Memtable.K4", "olderFollows is \(previous.olderFollows) before the node at version \(current.version)")
                    }
                }
                if level == 0 {
                    nodes += 1
                    if previous.map({ $0.compare(with: current.key) != 0 }) ?? true {
                        // The first node of a key is its newest change.
                        let hash = hashKey(current.key)
                        guard filter.mayContain(hash) else { throw fail("MemtableIndex.F1", "a key's filter bits are not set") }
                        // The index names the newest node, or a newer one left out of the list whose
                        // level-0 links lead to it (Memtable.D1).
                        var named = index.isComplete ? index.newest(current.key, hash: hash) : current
                        while let node = named, node != current, node.compare(with: current.key) == 0 { named = node.next(0) }
                        if named != current {
                            throw fail("MemtableIndex.X1", "the index does not name a key's newest node")
                        }
                    }
                }
                previous = current
                node = current.next(level)
            }
            if level == 0, let previous, previous.olderFollows { throw fail("Memtable.K4", "the last node has olderFollows set") }
        }
        let unlinked = unlinkedCount.load(ordering: .acquiring)
        guard nodes + unlinked == count else {
            throw fail("count", "\(nodes) nodes linked and \(unlinked) not yet, count says \(count)")
        }
    }
    #endif

    // MARK: Search

    /// The first node whose key is ≥ `key` (the newest change of `key` when it has one).
    func firstNode(atLeast key: UnsafeRawBufferPointer) -> MemtableNode? {
        var node = head
        var level = levels.load(ordering: .relaxed) - 1
        while true {
            let next = node.next(level)
            Self.prefetchBelow(node, level, next)
            if let next, next.compare(with: key) < 0 {
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
            let next = node.next(level)
            Self.prefetchBelow(node, level, next)
            if let next, key.map({ next.compare(with: $0) < 0 }) ?? true {
                node = next
            } else if level == 0 {
                return node == head ? nil : node
            } else {
                level -= 1
            }
        }
    }

    /// Starts loading the node a search compares next if it steps down from `node` at
    /// `level`, while it waits on `next`, the node it compares now: in a large memtable
    /// each node a search reaches is a cache miss, and the one below is known before
    /// `next` is compared (wasted when the search steps right instead). Two lines: a
    /// node's key starts 24 bytes or more into it.
    @inline(__always)
    private static func prefetchBelow(_ node: MemtableNode, _ level: Int, _ next: MemtableNode?) {
        guard level > 0, let below = node.next(level - 1), below != next else { return }
        cplatform_prefetch(below.base)
        cplatform_prefetch(below.base + 64)
    }

    // MARK: Linking (writer only; the batched insert of commits is Memtable+LaneInsert.swift)

    /// Links `inserted` (made, not linked) at its key's place: after a smaller key linked
    /// just before when `continuingRun`, else searched from the top.
    func link(_ inserted: MemtableNode, continuingRun: Bool) {
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

    /// Counts `count` nodes made and named in the index but not linked (Memtable+Deferred.swift).
    func countMade(_ count: Int) {
        nodeCount.wrappingAdd(count, ordering: .relaxed)
        if count > 0 { noteChanges() }
    }

    private func noteChanges() {
        if !holdsChanges.load(ordering: .relaxed) { holdsChanges.store(true, ordering: .relaxed) }
    }

    /// Links `inserted` after `finger[level]` at each of its levels (its predecessors
    /// there), leaving `finger` at it.
    func linkAfterFinger(_ inserted: MemtableNode) {
        let key = inserted.key
        let height = inserted.height
        // Memtable.K4: the node it goes before is an older change of its key, or of another key.
        if let older = finger[0].next(0), equalBytes(older.key, key) { inserted.markOlderFollows() }
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
        nodeCount.wrappingAdd(1, ordering: .relaxed)
        noteChanges()
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

    /// A batched lookup's first pass over its keys (Snapshot.withValues): starts loading
    /// the filter word of the key whose `hashKey` is `hash`.
    @inline(__always)
    func prefetchFilter(_ hash: UInt64) { filter.prefetch(hash) }

    /// A batched lookup's second pass: whether the filter lets the key of `hash` through,
    /// starting the load of its index slot when it does. A key the memtable lacks, most of
    /// a batch's in a store larger than its memtable, loads no slot.
    @inline(__always)
    func mayHold(_ hash: UInt64) -> Bool {
        // Every key inserted set its filter bits (MemtableIndex.F1).
        guard filter.mayContain(hash) else { return false }
        index.prefetch(hash)
        return true
    }

    /// 1 with probability 3/4, 2 with 3/16, … (branching factor 4), at most `maxHeight`.
    func randomHeight() -> Int {
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
