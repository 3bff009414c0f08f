// Waits for log frames to become durable on behalf of async commits, on a thread of its
// own: a task that commits suspends instead of blocking a thread of Swift's cooperative
// pool in fdatasync. The thread leads one group commit for everything queued while the
// previous one ran (so async commits share fdatasyncs as blocking ones do), then runs
// each commit's completion in version order.
//
// Invariants:
//  DurabilityWaiter.D1. Every enqueued completion runs exactly once: on the waiter thread, or on the
//      enqueuing thread when the waiter has stopped.
// Thread-safety: `enqueue` and `stop` from any thread; the queue is guarded by `monitor`.
import Foundation
import StrataLocks
import StrataWAL

final class DurabilityWaiter: @unchecked Sendable {
    private struct Pending {
        var lsn: LSN
        var completion: @Sendable () -> Void
    }

    private let log: WriteAheadLog
    private let monitor = ConditionLock()
    // Guarded by `monitor`.
    private var queue: [Pending] = []
    private var started = false
    private var stopped = false

    init(log: WriteAheadLog) {
        self.log = log
    }

    /// Runs `completion` once the frame at `lsn` is durable or its log has failed.
    func enqueue(_ lsn: LSN, completion: @escaping @Sendable () -> Void) {
        monitor.lock()
        guard !stopped else {
            monitor.unlock()
            completion()
            return
        }
        queue.append(Pending(lsn: lsn, completion: completion))
        if !started {
            started = true
            Thread.detachNewThread { [self] in run() }
        }
        monitor.broadcast()
        monitor.unlock()
    }

    /// Lets the thread finish what is queued and exit.
    func stop() {
        monitor.lock()
        stopped = true
        monitor.broadcast()
        monitor.unlock()
    }

    private func run() {
        while true {
            monitor.lock()
            while queue.isEmpty && !stopped { monitor.wait() }
            let work = queue
            queue.removeAll()
            monitor.unlock()
            guard let last = work.last else { return }
            // One group commit covers every queued frame; each completion then finds its
            // own frame done (or learns its own error) without waiting again.
            _ = try? log.waitUntilDone(last.lsn)
            for pending in work { pending.completion() }
        }
    }
}
