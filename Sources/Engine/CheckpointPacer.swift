// A background checkpoint's CPU priority, following the commits.
//
// A checkpoint started by `startCheckpoint` runs beside the threads that commit and read.
// While commits come its writes keep their priority: it folds the memtable they fill, and
// a checkpoint held back lets the memtable taking commits grow, each key linked into a
// larger one costing more (fills of 1M keys ran 14 and 22 % slower with every checkpoint
// at nice 10). Once the commits stop (the end of a load, or a store that is only read),
// what is left of its writes competes only with readers, whose latency is what the store's
// users see: their thread's priority is lowered then, once (on two CPUs, two readers and
// a checkpoint's writes at the same priority share them while the writes want a CPU:
// ycsb-c at two threads right after its load read a median of 0.89 × LMDB's rate in ten
// runs before, 1.31 × with the writes yielding, alternating). A checkpoint that readers or
// an idle tick started
// (`checkpointIfQuiet`, `checkpointIfIdle`) yields from the start of its writes.
//
// A thread may lower its own priority but not raise it back without privilege. So the
// writes (`TreeWriter.apply`, the bulk of a checkpoint's work, taking no lock a commit or
// a read waits for) run on a thread of their own, made for them (`onThreadOfItsOwn`), and
// only that thread is lowered; the freeze, the syncs, the publication of the new tree and
// the release of the log's segments, which hold locks commits and readers wait for, run
// on the checkpoint's thread at the priority of the thread that started it.
//
// Invariants:
//  CheckpointPacer.C1. Only the thread of a background checkpoint's writes is lowered, never
//      a caller's (`checkpoint()` and a close run theirs without a pacer) and never the
//      thread that takes the checkpoint's locks.
//  CheckpointPacer.C2. A pacer lowers at most once, and, unless it yields from its start,
//      only once `quietInterval` passed with no commit enqueued, between two of the runs of
//      pages its writer wrote.
// Thread-safety: used by the thread of the writes alone.
import CStrataPlatform
import Dispatch
import Foundation

final class CheckpointPacer {
    /// How long no commit must have been enqueued before a checkpoint started by the
    /// writes yields: under a stream of commits one is enqueued every few milliseconds or
    /// less (a fill of 1,000-key batches: one every 1-2 ms). Enqueued, not published: a
    /// commit is published after its group's fdatasync, which may itself take 10 ms.
    static let quietInterval = Duration.milliseconds(10)
    /// How far a yielding checkpoint lowers its writes' thread, in nice steps: at 10 the
    /// kernel gives it about a tenth of the weight of a thread at 0 when both want a CPU,
    /// and all of an idle one.
    static let niceIncrement: Int32 = 10

    private let commits: () -> UInt64
    private let now: () -> ContinuousClock.Instant
    private let lower: () -> Void
    private let yieldsFromStart: Bool
    private var seen: UInt64
    private var seenAt: ContinuousClock.Instant
    /// Whether this pacer lowered its thread (CheckpointPacer.C2).
    private(set) var yielded = false

    /// `commits`: the version of the last commit the store enqueued; `yielding`: lower at
    /// `begin()`; `lower`: what lowers the calling thread (once).
    init(commits: @escaping () -> UInt64, yielding: Bool,
         now: @escaping () -> ContinuousClock.Instant = { ContinuousClock.now }, lower: @escaping () -> Void) {
        self.commits = commits
        self.now = now
        self.lower = lower
        yieldsFromStart = yielding
        seen = commits()
        seenAt = now()
    }

    /// Called on the writes' thread before they start: yields there if the checkpoint
    /// yields from its start.
    func begin() {
        if yieldsFromStart && !yielded { yield() }
    }

    /// Called after each run of pages the checkpoint wrote: yields once no commit was
    /// enqueued for `quietInterval`.
    func ranOn() {
        guard !yielded else { return }
        let count = commits(), instant = now()
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

    /// Runs `body` on `value` on a new thread and waits for it, `value` handed to that
    /// thread and back: the thread a pacer may lower, apart from the caller's. Rethrows
    /// what `body` throws.
    static func onThreadOfItsOwn<Value, Result>(_ value: inout Value,
                                                _ body: @escaping (inout Value) throws -> Result) throws -> Result {
        let handOff = HandOff(value, body)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            handOff.run()
            done.signal()
        }
        done.wait()
        // Taken out, not copied: the thread may still hold the hand-off for a moment, and a
        // copy left in it would make the caller's next change of `value` copy its arrays.
        value = handOff.take()
        return try handOff.result!.get()
    }

    /// What `onThreadOfItsOwn` hands to its thread and back: used by one thread at a time,
    /// the caller's until the thread starts and again once it signalled the end.
    private final class HandOff<Value, Result>: @unchecked Sendable {
        private var value: Value?
        let body: (inout Value) throws -> Result
        var result: Swift.Result<Result, any Error>?

        init(_ value: Value, _ body: @escaping (inout Value) throws -> Result) {
            self.value = value
            self.body = body
        }

        func run() {
            result = Swift.Result { try body(&value!) }
        }

        /// The value, no longer held here.
        func take() -> Value {
            defer { value = nil }
            return value!
        }
    }
}
