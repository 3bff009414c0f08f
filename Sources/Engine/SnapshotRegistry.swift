// The view new snapshots take, and the snapshots alive: which trees' pages a checkpoint
// must not reuse, and which versions' tombstones it must keep.
//
// Every read takes a snapshot and ends it, so counting snapshots must not make readers
// share a cache line. Snapshots are counted in stripes, one per CPU (the CPU a snapshot
// starts on picks its stripe, and it ends in the same one). Each stripe keeps the view it
// last handed out with a count of its snapshots; a snapshot of a newer view first moves
// that count to the stripe's per-generation and per-version tables. While nothing is
// published, taking a snapshot is one atomic load of the publication count and an
// uncontended lock of the stripe: no shared line is written. Before the stripes, two
// reader threads (strata-bench ycsb-c, 1M records) read fewer keys a second than one:
// every snapshot took one lock twice and hashed into two dictionaries under it.
//
// Invariants:
//  SnapshotRegistry.R1. Every live snapshot is counted in its stripe, under its view's tree
//      generation and version, until it ends.
//  SnapshotRegistry.R2. A stripe hands out its view only while `sequence` still equals the
//      count at which the view was published; it reads that count under its own lock. So a
//      scan of the stripes that starts after a publication misses no snapshot of an older
//      view: one counted before the scan reached its stripe is seen, and one that takes the
//      stripe's lock after the scan left it sees the new count and takes the new view.
// Thread-safety: `Sendable`. Lock order: a stripe's lock, then `published`'s.
import CStrataPlatform
import Foundation
import StrataLocks
import Synchronization

final class SnapshotRegistry: Sendable {
    /// The view new snapshots take, and how many views were published before it.
    private let published: Locked<(state: EngineState, sequence: UInt64)>
    /// `published`'s count, read without its lock.
    private let sequence = Atomic<UInt64>(0)
    private let stripes: [PinStripe]

    /// `stripes` is rounded up to a power of two (one per CPU by default, at most 64).
    init(_ state: EngineState, stripes: Int = ProcessInfo.processInfo.activeProcessorCount) {
        // Publication is a few stores; a waiter spins briefly before it sleeps.
        published = Locked((state, 0), adaptive: true)
        let count = 1 << (Int.bitWidth - (min(max(stripes, 1), 64) - 1).leadingZeroBitCount)
        self.stripes = (0..<count).map { _ in PinStripe() }
    }

    /// The view new snapshots take.
    var current: EngineState { published.withLock { $0.state } }

    /// How many views were published so far, read without the lock: a reader that saw the
    /// same count before has nothing new to look at.
    var publications: UInt64 { sequence.load(ordering: .acquiring) }

    /// Replaces the view new snapshots take with what `change` makes of it (nil leaves it
    /// as it is) and returns the view now current. `change` runs under the lock.
    @discardableResult
    func publish(_ change: (EngineState) -> EngineState?) -> EngineState {
        published.withLock { view in
            // The same view again is no publication: a stripe would count it twice.
            guard let next = change(view.state), next !== view.state else { return view.state }
            view.state = next
            view.sequence += 1
            sequence.store(view.sequence, ordering: .releasing)
            return next
        }
    }

    /// Counts a new snapshot of the current view: the view, and the stripe to end it in.
    func pin() -> (state: EngineState, stripe: Int) {
        let index = Int(cplatform_cpu_hint()) & (stripes.count - 1)
        // The stale view is returned so that its last reference (and its memtables) goes
        // after the lock, not under it.
        let (state, _) = stripes[index].counts.withLock { counts -> (EngineState, EngineState?) in
            var stale: EngineState?
            if counts.viewSequence != sequence.load(ordering: .acquiring) || counts.view == nil {
                let latest = published.withLock { $0 }
                stale = counts.retireView()
                counts.view = latest.state
                counts.viewSequence = latest.sequence
            }
            counts.viewPins += 1
            return (counts.view!, stale)
        }
        return (state, index)
    }

    /// Ends a snapshot of `state` that `pin()` counted in `stripe`.
    func unpin(_ state: EngineState, stripe: Int) {
        _ = stripes[stripe].counts.withLock { counts -> EngineState? in
            guard counts.view === state else {
                counts.generations.decrement(state.treeGeneration)
                counts.versions.decrement(state.version)
                // An idle view no new snapshot will take goes too, as below.
                guard counts.viewPins == 0, counts.viewSequence != sequence.load(ordering: .relaxed) else { return nil }
                return counts.retireView()
            }
            counts.viewPins -= 1
            // A view no snapshot holds and none will take again keeps no memtable alive.
            guard counts.viewPins == 0, counts.viewSequence != sequence.load(ordering: .relaxed) else { return nil }
            return counts.retireView()
        }
    }

    /// The oldest tree generation and the oldest version that live snapshots read (nil
    /// when none lives). Snapshots taken during the scan read the current view or a newer
    /// one (SnapshotRegistry.R2).
    func oldestPins() -> (generation: UInt64?, version: UInt64?) {
        var generation: UInt64?
        var version: UInt64?
        func note(_ value: UInt64?, in oldest: inout UInt64?) {
            if let value { oldest = min(oldest ?? value, value) }
        }
        for stripe in stripes {
            stripe.counts.withLock { counts in
                if counts.viewPins > 0, let view = counts.view {
                    note(view.treeGeneration, in: &generation)
                    note(view.version, in: &version)
                }
                note(counts.generations.keys.min(), in: &generation)
                note(counts.versions.keys.min(), in: &version)
            }
        }
        return (generation, version)
    }

    /// Lets go of the views stripes kept that no snapshot holds and no new one will take
    /// (after a checkpoint, so that the memtable it folded is freed).
    func releaseIdleViews() {
        for stripe in stripes {
            _ = stripe.counts.withLock { counts -> EngineState? in
                guard counts.viewPins == 0, counts.viewSequence != sequence.load(ordering: .relaxed) else { return nil }
                return counts.retireView()
            }
        }
    }
}

/// One CPU's count of live snapshots, kept on cache lines of its own.
private final class PinStripe: Sendable {
    // Padding either side: stripes are allocated one after another, and a stripe's lock
    // and counts are written by every snapshot on its CPU.
    private let leading = CacheLinePadding()
    // `Mutex` rather than `Locked`: it lives inline, between the paddings, where `Locked`
    // allocates its pthread mutex apart (next to the next stripe's). Two threads contend
    // for a stripe only when one is preempted holding it, or moved CPUs between taking
    // and ending a snapshot.
    let counts = Mutex(StripeCounts())
    private let trailing = CacheLinePadding()
}

/// 64 bytes of nothing: a stored property of it keeps the fields on either side off one
/// cache line.
struct CacheLinePadding {
    let bytes: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
}

private struct StripeCounts {
    /// The view this stripe last handed out, the publication count it had then, and how
    /// many live snapshots of it began here.
    var view: EngineState?
    var viewSequence: UInt64 = .max
    var viewPins = 0
    /// Live snapshots of older views, by tree generation and by version.
    var generations: [UInt64: Int] = [:]
    var versions: [UInt64: Int] = [:]

    /// Moves the view's snapshots to the tables and forgets it; returns it.
    mutating func retireView() -> EngineState? {
        guard let view else { return nil }
        if viewPins > 0 {
            generations[view.treeGeneration, default: 0] += viewPins
            versions[view.version, default: 0] += viewPins
        }
        self.view = nil
        viewPins = 0
        viewSequence = .max
        return view
    }
}

private extension Dictionary where Key == UInt64, Value == Int {
    mutating func decrement(_ key: UInt64) {
        guard let count = self[key] else { preconditionFailure("a snapshot ended that no stripe counted") }
        self[key] = count > 1 ? count - 1 : nil
    }
}
