// Read-ahead for a forward walk of the memtable. A walk follows level 0 of the skip list
// in key order, but its nodes lie in the arena in the order they were written: in a
// memtable larger than the caches every step is a cache miss that waits for the one before
// it (a count over 100 index entries waited for 100 misses in turn). The links above level
// 0 name nodes further on: a node of height 2 or more comes about every fourth node, and
// its level-1 link names the next such node. So the stretches of level 0 between them
// (segments) can be walked side by side: a batch walks up to `lanes` segments interleaved,
// a step of each per round with the lane's next node prefetched, so that their misses
// overlap, and the walk then takes the batch's nodes from the cache. A lane starts as soon
// as the level-1 link of the segment before it is read, one a round.
//
// Invariants:
//  MemtableLookahead.L1. Batches, one after another, hand out the nodes that following level-0 links one by
//      one would: a segment runs from its first node, at level 0, up to the node its
//      level-1 link named when read, found again by identity (it comes later at level 0,
//      Memtable.K1, and nodes are never unlinked); the next segment starts at that node. A lane
//      stopped after `laneNodes` nodes carries the rest of its segment into the next
//      batch, and the lanes after it are read again there.
//  MemtableLookahead.L2. Nodes linked while a batch is read may be in it or not, as for a walk following the
//      links itself: they are newer than any version a reader walks at (Memtable.K3), and a newer
//      change of a key is linked before its older ones (Memtable.K1), so missing one changes nothing.
// Thread-safety: one walk's own state, used from the thread that walks. The walk keeps its
// place in the batch itself (`MemtableIterator`); a copied walk gets a read-ahead of its own
// before it reads another batch.
import CStrataPlatform

final class MemtableLookahead {
    /// Segments walked side by side in a batch.
    static let lanes = 8
    /// Nodes a lane takes from its segment in one batch (a segment averages 4).
    static let laneNodes = 16

    /// The batch: lane `i`'s nodes from `i * laneNodes`, gathered in order at the end of a fill.
    let batch: UnsafeMutablePointer<MemtableNode>
    /// The rest of a segment a lane stopped in: where it goes on, and the node that ends it.
    private var carried: (start: MemtableNode, end: MemtableNode?)?
    /// The first node of the next segment (height 2 or more), nil past the last one.
    private var segment: MemtableNode?

    /// Read-ahead from `start`, a node of height 2 or more: the first node of the first batch.
    init(at start: MemtableNode) {
        precondition(start.height >= 2, "a segment starts at a node of height 2 or more")
        batch = .allocate(capacity: Self.lanes * Self.laneNodes)
        segment = start
    }

    /// A copy that reads the batches after this one's current batch, on its own.
    init(copying other: MemtableLookahead) {
        batch = .allocate(capacity: Self.lanes * Self.laneNodes)
        carried = other.carried
        segment = other.segment
    }

    deinit { batch.deallocate() }

    /// An offset into the line after a node's first when the node starts near a line's
    /// start: a node of height 2 has its key from `MemtableNode.Field.links + 16` = 32.
    private static let keyLineOffset = 48

    /// Starts loading a node: its first line, and the next one, where the key of a node that
    /// straddles two lines continues.
    @inline(__always)
    static func prefetch(_ node: MemtableNode) {
        cplatform_prefetch(node.base)
        cplatform_prefetch(node.base + keyLineOffset)
    }

    private struct Lane {
        /// The node the lane takes next (nil once it stopped).
        var cursor: MemtableNode?
        /// The node that ends its segment (nil: the end of the list).
        let end: MemtableNode?
        var taken = 0
        /// Where the segment goes on when the lane stopped short of its end.
        var stoppedAt: MemtableNode?
    }

    /// Reads the next batch into `batch` (MemtableLookahead.L1) and returns how many nodes it holds (none at
    /// the end of the list): the carried rest of a segment first, then a segment per lane,
    /// each started as the level-1 link of the one before is read.
    func fill() -> Int {
        var count = 0
        withUnsafeTemporaryAllocation(of: Lane.self, capacity: Self.lanes) { lanes in
            let lanes = lanes.baseAddress!
            var started = 0
            var running = 0
            if let carried {
                lanes.initialize(to: Lane(cursor: carried.start, end: carried.end))
                started = 1
                running = 1
                self.carried = nil
            }
            while running > 0 || (started < Self.lanes && segment != nil) {
                // The next segment's first node was prefetched a round ago: its level-1
                // link is the end of its segment and the start of the one after.
                if started < Self.lanes, let start = segment {
                    let end = start.next(1)
                    if let end { Self.prefetch(end) }
                    (lanes + started).initialize(to: Lane(cursor: start, end: end))
                    started += 1
                    running += 1
                    segment = end
                }
                for index in 0..<started {
                    let lane = lanes + index
                    guard let node = lane.pointee.cursor else { continue }
                    batch[index * Self.laneNodes + lane.pointee.taken] = node
                    lane.pointee.taken += 1
                    let successor = node.next(0)
                    if successor == nil || successor == lane.pointee.end {
                        lane.pointee.cursor = nil
                        running -= 1
                    } else if lane.pointee.taken == Self.laneNodes {
                        lane.pointee.cursor = nil
                        lane.pointee.stoppedAt = successor
                        running -= 1
                    } else {
                        lane.pointee.cursor = successor
                        Self.prefetch(successor.unsafelyUnwrapped)
                    }
                }
            }
            // Gather the lanes in order, up to the first one that stopped short; the rest
            // of its segment starts the next batch, and the segments after it are read again.
            for index in 0..<started {
                let lane = lanes[index]
                // Forward, element by element: the gathered nodes never pass the lane's own.
                for taken in 0..<lane.taken { batch[count + taken] = batch[index * Self.laneNodes + taken] }
                count += lane.taken
                if let stoppedAt = lane.stoppedAt {
                    carried = (stoppedAt, lane.end)
                    segment = lane.end
                    break
                }
            }
            lanes.deinitialize(count: started)
        }
        return count
    }
}

// Counting with read-ahead. A count needs no node in key order, only each node's header,
// so its lanes hand nothing back: each walks a segment to its end and counts as it goes,
// and a lane that ends frees its place for the next segment at once (a fill waits for its
// batch's longest segment). What order still decides is handled where segments meet:
//  MemtableLookahead.C1. A change is counted iff it is visible at the version, is not a delete, and the node
//      before it is not a visible change of its key (versions fall along a key's changes,
//      Memtable.K1, so that node is the key's visible change and hides it). Inside a segment the
//      lane knows the node before; a segment's first node is counted by its own lane as
//      if nothing hid it, and the lane of the segment before takes it back when its last
//      node was a visible change with an older one after it (Memtable.K4).
//  MemtableLookahead.C2. A lane compares its keys with the bound until the segment after it starts, which
//      is done only once that segment's first key is below the bound: every node of its
//      own segment is then below it too. A segment whose first key is not below the bound
//      starts no lane, nor does any after it.
//  MemtableLookahead.C3. With a limit, the count may stop once it is past the limit by more than the lanes
//      running, each of which may still take back one node (MemtableLookahead.C1).
extension MemtableLookahead {
    private struct CountingLane {
        var cursor: MemtableNode
        /// The first node of the next segment (nil: the end of the list).
        let end: MemtableNode?
        /// Whether the node before `cursor` was a visible change of its key (MemtableLookahead.C1).
        var hidden: Bool
        /// Whether the next segment started, so no key of this one reaches the bound (MemtableLookahead.C2).
        var endBelowBound: Bool
    }

    /// How many keys from `start` (a node of height 2 or more) on, below `upper` (nil: to the
    /// end), have a value at `version`, counting no further than `limit` (MemtableLookahead.C3). `hidden`:
    /// the node before `start` was a visible change of its key (MemtableLookahead.C1).
    static func countValues(from start: MemtableNode, hidden: Bool, below upper: UnsafeRawBufferPointer?,
                            at version: UInt64, limit: Int) -> Int {
        precondition(start.height >= 2, "a segment starts at a node of height 2 or more")
        var count = 0
        withUnsafeTemporaryAllocation(of: CountingLane.self, capacity: lanes) { buffer in
            let lanes = buffer.baseAddress!
            // Lanes `0..<running` run; the one started last is at `newest` (-1 when it ended).
            var running = 0
            var newest = -1
            var segment: MemtableNode? = start
            var firstHidden = hidden
            func reachesBound(_ node: MemtableNode) -> Bool {
                guard let upper else { return false }
                return compareBytes(node.key, upper) >= 0
            }
            while true {
                // Start the next segment's lane when a place is free and its first key is below
                // the bound (MemtableLookahead.C2); it was prefetched when the segment before it started.
                if running < Self.lanes, let first = segment {
                    if reachesBound(first) {
                        segment = nil
                    } else {
                        if newest >= 0 { lanes[newest].endBelowBound = true }
                        let end = first.next(1)
                        if let end { prefetch(end) }
                        (lanes + running).initialize(to: CountingLane(cursor: first, end: end, hidden: firstHidden,
                                                                      endBelowBound: upper == nil))
                        firstHidden = false
                        newest = running
                        running += 1
                        segment = end
                    }
                }
                if running == 0 { return }
                var index = 0
                while index < running {
                    let lane = lanes + index
                    let node = lane.pointee.cursor
                    if !lane.pointee.endBelowBound && reachesBound(node) {
                        // This segment holds the bound: no segment after it starts (MemtableLookahead.C2).
                        segment = nil
                    } else {
                        if node.counts(at: version, hidden: &lane.pointee.hidden) { count += 1 }
                        if let next = node.next(0), next != lane.pointee.end {
                            lane.pointee.cursor = next
                            prefetch(next)
                            index += 1
                            continue
                        }
                        // The next segment's first node is an older change this one's last
                        // node hides: its own lane counts it (MemtableLookahead.C1).
                        if lane.pointee.hidden, let end = lane.pointee.end, !end.isDelete { count -= 1 }
                    }
                    // The lane ended; the last running lane takes its place.
                    running -= 1
                    if newest == index { newest = -1 } else if newest == running { newest = index }
                    if index != running { lane.pointee = lanes[running] }
                    (lanes + running).deinitialize(count: 1)
                }
                if count - running >= limit { return }
            }
        }
        return min(count, limit)
    }
}
