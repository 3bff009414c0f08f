// Commit watches: a task that waits for the next commit to write under a key prefix (the
// records layer's event deliveries wait this way for new events).
//
// Invariants:
//  CommitWatch.W1. A commit published after `generation` was read and putting a key under
//      the prefix makes `wait(beyond:)` of that generation return true: no wake-up is lost
//      between a reader's look at the store and its wait.
//  CommitWatch.W2. Publishing never waits: it bumps a counter and resumes at most one
//      suspended task, under the watch's lock.
// Thread-safety: `Sendable`; the state is behind a mutex.
import StrataEngine
import StrataWAL
import Synchronization

/// Counts the published commits that put a key under `prefix`; a task can wait for the
/// count to move. Made by `Store.watchCommits(prefix:)`.
package final class CommitWatch: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var waiter: CheckedContinuation<Bool, Never>?
        var finished = false
        var cancelled = false
    }

    let prefix: [UInt8]
    private let state = Mutex(State())

    init(prefix: [UInt8]) { self.prefix = prefix }

    /// How many matching commits were published so far. Read it before looking at the
    /// store, then `wait(beyond:)` it (CommitWatch.W1).
    package var generation: UInt64 { state.withLock { $0.generation } }

    /// Returns true once a matching commit was published after `generation`, false when
    /// the store closed or the task was cancelled. One task waits at a time.
    package func wait(beyond generation: UInt64) async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let answer: Bool? = state.withLock { state in
                    if state.generation > generation { return true }
                    if state.finished || state.cancelled { return false }
                    precondition(state.waiter == nil, "two tasks wait on one commit watch")
                    state.waiter = continuation
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                state.cancelled = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: false)
        }
    }

    /// Counts `batches` that put a key under the prefix (deletes add nothing to wait for)
    /// and wakes the waiter (CommitWatch.W2).
    func publish(_ batches: [(version: UInt64, batch: WALBatch)]) {
        let matches = batches.contains { entry in
            entry.batch.operations.contains { operation in operation.value != nil && operation.key.starts(with: prefix) }
        }
        guard matches else { return }
        let waiter = state.withLock { state in
            state.generation += 1
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: true)
    }

    /// Ends the watch: the store closed.
    func finish() {
        let waiter = state.withLock { state in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: false)
    }
}

extension Store {
    /// A watch of the commits that write under `prefix` (CommitWatch.W1); end it with
    /// `removeWatch` when done. A watch made after the store closed is finished already.
    package func watchCommits(prefix: [UInt8]) -> CommitWatch {
        let watch = CommitWatch(prefix: prefix)
        feed.add(watch)
        return watch
    }

    package func removeWatch(_ watch: CommitWatch) {
        feed.remove(watch: watch)
    }
}
