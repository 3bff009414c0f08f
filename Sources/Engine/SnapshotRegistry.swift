// The view new snapshots take, and the snapshots alive: which trees' pages a checkpoint
// must not reuse, and which versions' tombstones it must keep.
//
// Every read takes a snapshot and ends it, so counting snapshots must not make readers
// share a cache line. Snapshots are counted in stripes, one per CPU (the CPU a snapshot
// starts on picks its stripe, and it ends in the same one). Each stripe keeps the view it
// last handed out with a count of its snapshots; a snapshot of a newer view first moves
// that view, with its count, to the stripe's older views. While nothing is published,
// taking a snapshot is one atomic load of the publication count and an uncontended lock of
// the stripe: no shared line is written. Before the stripes, two reader threads
// (strata-bench ycsb-c, 1M records) read fewer keys a second than one: every snapshot took
// one lock twice and hashed into two dictionaries under it.
//
// The stripe also holds the views its snapshots read, each retained once when the stripe
// takes it up and released once its last snapshot has ended and no new one will take it,
// so that a snapshot borrows its view instead of retaining it. A retain and a release per
// snapshot are atomic writes to the view's reference count, a line every reading thread
// shares: two threads taking snapshots on two CPUs took 275–337 ns a snapshot each, one
// thread alone 69–74 ns.
//
// Invariants:
//  SnapshotRegistry.R1. Every live snapshot is counted in its stripe, with the view it reads,
//      until it ends.
//  SnapshotRegistry.R2. A stripe hands out its view only while `sequence` still equals the
//      count at which the view was published; it reads that count under its own lock. So a
//      scan of the stripes that starts after a publication misses no snapshot of an older
//      view: one counted before the scan reached its stripe is seen, and one that takes the
//      stripe's lock after the scan left it sees the new count and takes the new view.
//  SnapshotRegistry.R3. A view a live snapshot reads is retained by its stripe (as the
//      stripe's view or among its older views) until that snapshot ends: `pin()` hands
//      out a borrowed reference, valid until the matching `unpin`.
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

    /// Counts a new snapshot of the current view: the view, borrowed until `unpin`
    /// (SnapshotRegistry.R3), and the stripe to end it in.
    func pin() -> (view: Unmanaged<EngineState>, stripe: Int) {
        let index = Int(cplatform_cpu_hint()) & (stripes.count - 1)
        let (view, stale) = stripes[index].counts.withLock { counts -> (Unmanaged<EngineState>, Unmanaged<EngineState>?) in
            var stale: Unmanaged<EngineState>?
            if counts.viewSequence != sequence.load(ordering: .acquiring) || counts.view == nil {
                let latest = published.withLock { $0 }
                stale = counts.retireView()
                counts.view = .passRetained(latest.state)
                counts.viewSequence = latest.sequence
            }
            counts.viewPins += 1
            return (counts.view.unsafelyUnwrapped, stale)
        }
        // The stale view's last reference (and its memtables) goes after the lock, not under it.
        stale?.release()
        return (view, index)
    }

    /// Ends a snapshot of `view` that `pin()` counted in `stripe`.
    func unpin(_ view: Unmanaged<EngineState>, stripe: Int) {
        // Views let go of are released after the lock, as in `pin()`.
        let (ended, idle) = stripes[stripe].counts.withLock { counts -> (Unmanaged<EngineState>?, Unmanaged<EngineState>?) in
            var ended: Unmanaged<EngineState>?
            if counts.view?.toOpaque() == view.toOpaque() {
                counts.viewPins -= 1
            } else {
                ended = counts.endOlder(view)
            }
            // A view no snapshot holds and none will take again keeps no memtable alive.
            guard counts.viewPins == 0, counts.viewSequence != sequence.load(ordering: .relaxed) else { return (ended, nil) }
            return (ended, counts.retireView())
        }
        ended?.release()
        idle?.release()
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
                    view._withUnsafeGuaranteedRef { view in
                        note(view.treeGeneration, in: &generation)
                        note(view.version, in: &version)
                    }
                }
                for older in counts.older {
                    older.view._withUnsafeGuaranteedRef { view in
                        note(view.treeGeneration, in: &generation)
                        note(view.version, in: &version)
                    }
                }
            }
        }
        return (generation, version)
    }

    /// Lets go of the views stripes kept that no snapshot holds and no new one will take
    /// (after a checkpoint, so that the memtable it folded is freed).
    func releaseIdleViews() {
        for stripe in stripes {
            let released = stripe.counts.withLock { counts -> Unmanaged<EngineState>? in
                guard counts.viewPins == 0, counts.viewSequence != sequence.load(ordering: .relaxed) else { return nil }
                return counts.retireView()
            }
            released?.release()
        }
    }

    deinit {
        // No snapshot outlives its engine's registry (a snapshot holds its engine): the
        // views left are those the stripes kept to hand out again.
        for stripe in stripes {
            stripe.counts.withLock { counts in
                counts.view?.release()
                counts.view = nil
                for older in counts.older { older.view.release() }
                counts.older = []
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
    /// The view this stripe last handed out (retained by the stripe: SnapshotRegistry.R3),
    /// the publication count it had then, and how many live snapshots of it began here.
    var view: Unmanaged<EngineState>?
    var viewSequence: UInt64 = .max
    var viewPins = 0
    /// Views handed out before, each retained by the stripe, with how many of their
    /// snapshots that began here still live (never 0: a view goes with its last one).
    var older: [(view: Unmanaged<EngineState>, pins: Int)] = []

    /// Moves the view to `older` when snapshots of it live, and forgets it. Returns it when
    /// none does, for the caller to release (after the stripe's lock).
    mutating func retireView() -> Unmanaged<EngineState>? {
        guard let view else { return nil }
        self.view = nil
        defer {
            viewPins = 0
            viewSequence = .max
        }
        guard viewPins == 0 else {
            older.append((view, viewPins))
            return nil
        }
        return view
    }

    /// Ends a snapshot of `view`, one of `older`. Returns the view when that was its last
    /// snapshot, for the caller to release.
    mutating func endOlder(_ view: Unmanaged<EngineState>) -> Unmanaged<EngineState>? {
        guard let index = older.firstIndex(where: { $0.view.toOpaque() == view.toOpaque() }) else {
            preconditionFailure("a snapshot ended that no stripe counted")
        }
        older[index].pins -= 1
        return older[index].pins == 0 ? older.remove(at: index).view : nil
    }
}
