// A background checkpoint's CPU priority, following the commits.
//
// A checkpoint started by `startCheckpoint` runs on a thread of its own beside the threads
// that commit and read. While commits flow it keeps their priority: it folds the memtable
// they fill, and a checkpoint held back lets the memtable taking commits grow, each key
// linked into it costing more (fills of 1M keys ran 10-20 % slower with every checkpoint
// at nice 10). Once the commits stop (the end of a load, or a store that is only read),
// what is left of it competes only with readers, whose latency is what the store's users
// see: it lowers its thread's priority then, once, for the rest of its run (on two CPUs, two
// readers beside a checkpoint at the same priority got two thirds of them: ycsb-c at two
// threads right after its load read a median of 0.85M keys a second, 1.17M with the
// checkpoint yielding, in eight alternating pairs). A thread may lower its own priority but not raise it back without
// privilege; the next checkpoint's thread starts at the priority of the thread that
// started it, a committer's or a reader's. A checkpoint that readers or an idle tick
// started (`checkpointIfQuiet`, `checkpointIfIdle`) yields from its start.
//
// Invariants:
//  CheckpointPacer.C1. Only a checkpoint's own thread is lowered, never a caller's: a pacer
//      is made only on the thread `startCheckpoint` starts (`checkpoint()` and a close run
//      theirs without one).
//  CheckpointPacer.C2. A pacer lowers at most once, and, unless it yields from its start,
//      only once `quietInterval` passed with no view published (every commit publishes
//      one) between two of its runs' writes.
// Thread-safety: used by the checkpoint's thread alone.
import CStrataPlatform

final class CheckpointPacer {
    /// How long no commit must have been published before a checkpoint started by the
    /// writes yields: under a stream of commits one is published every few milliseconds
    /// or less (a fill of 1,000-key batches: one every 1-2 ms).
    static let quietInterval = Duration.milliseconds(10)
    /// How far a yielding checkpoint lowers its thread's priority, in nice steps: at 10 the
    /// kernel gives it about a tenth of the weight of a thread at 0 when both want a CPU,
    /// and all of an idle one.
    static let niceIncrement: Int32 = 10

    private let publications: () -> UInt64
    private let now: () -> ContinuousClock.Instant
    private let lower: () -> Void
    private var seen: UInt64
    private var seenAt: ContinuousClock.Instant
    /// Whether this pacer lowered its thread (CheckpointPacer.C2).
    private(set) var yielded = false

    /// `publications`: how many views the store published so far (`SnapshotRegistry`);
    /// `yielding`: lower at once; `lower`: what lowers the thread (once).
    init(publications: @escaping () -> UInt64, yielding: Bool,
         now: @escaping () -> ContinuousClock.Instant = { ContinuousClock.now }, lower: @escaping () -> Void) {
        self.publications = publications
        self.now = now
        self.lower = lower
        seen = publications()
        seenAt = now()
        if yielding { yield() }
    }

    /// Called after each run of pages the checkpoint wrote: yields once no commit was
    /// published for `quietInterval`.
    func ranOn() {
        guard !yielded else { return }
        let count = publications(), instant = now()
        if count != seen {
            (seen, seenAt) = (count, instant)
        } else if instant - seenAt >= Self.quietInterval {
            yield()
        }
    }

    private func yield() {
        yielded = true
        lower()
    }

    /// Lowers the calling thread's priority by `niceIncrement`; whether it was lowered
    /// (false where threads have no priority of their own, or the call failed).
    static func lowerCurrentThread() -> Bool {
        #if os(Linux)
        return cplatform_lower_thread_priority(niceIncrement) == 0
        #else
        return false
        #endif
    }

    /// The calling thread's nice value (0 where threads have none of their own).
    static var currentThreadNice: Int { Int(cplatform_thread_nice()) }
}
