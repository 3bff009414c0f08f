// Observed queries: `store.observe { context in … }` is an AsyncSequence of a query's
// value, current first, then again after each durable commit that may have changed it.
//
// Invariants:
//  V1. Every value is computed on a read-only context at a published version, so it never
//      shows a state a crash could take away (in `.full` durability), and values come in
//      version order.
//  V2. A commit never waits for an observer: publishing only raises a version number and
//      wakes one waiting task. A slow consumer gets the latest value, not a backlog: the
//      stream buffers one value, and commits made while a value is computed or waiting
//      are folded into the next computation.
//  V3. The observation ends when the consuming task stops iterating (or is cancelled),
//      when the query throws (the sequence throws it), or when the store closes.
import StrataEngine
import Synchronization

/// The values of an observed query (`Store.observe`): the current one first, then one
/// after each durable commit that may have changed it.
public struct StoreObservation<Value: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Value
    let stream: AsyncThrowingStream<Value, any Error>

    public func makeAsyncIterator() -> AsyncThrowingStream<Value, any Error>.Iterator { stream.makeAsyncIterator() }
}

extension Store {
    /// Observes `query`: yields its value on a read-only context at the latest version,
    /// then again after every durable commit (a value equal to the last one yielded is
    /// not repeated). The query runs on a task of its own, never on the committing thread.
    /// A consumer that falls behind gets the latest value (V2). Ends as V3 says.
    public func observe<Value: Sendable & Equatable>(
        _ query: @escaping @Sendable (Context) throws -> Value
    ) -> StoreObservation<Value> {
        observe(query, isNew: { $0 != $1 })
    }

    /// `observe` for a value that is not `Equatable`: yields after every durable commit.
    public func observe<Value: Sendable>(
        _ query: @escaping @Sendable (Context) throws -> Value
    ) -> StoreObservation<Value> {
        observe(query, isNew: { _, _ in true })
    }

    /// How many observed queries are running (each ends as V3 says).
    public var observationCount: Int { feed.signalCount }

    private func observe<Value: Sendable>(_ query: @escaping @Sendable (Context) throws -> Value,
                                          isNew: @escaping @Sendable (Value, Value) -> Bool) -> StoreObservation<Value> {
        let (stream, continuation) = AsyncThrowingStream<Value, any Error>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let signal = VersionSignal()
        let id = feed.add(signal)
        let task = Task.detached { [self] in
            var last: Value?
            var seen: UInt64?
            defer { feed.remove(signal: id) }
            while !Task.isCancelled {
                do {
                    let context = makeReadOnlyContext()
                    defer { context.discard() }
                    let value = try query(context)
                    seen = context.version
                    if last.map({ isNew($0, value) }) ?? true {
                        last = value
                        continuation.yield(value)
                    }
                } catch EngineError.closed {
                    break
                } catch {
                    continuation.finish(throwing: error)
                    return
                }
                guard await signal.wait(after: seen ?? 0) else { break }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in
            task.cancel()
            signal.finish()
        }
        return StoreObservation(stream: stream)
    }
}

/// The latest published version, and the one task waiting for a newer one (V2).
final class VersionSignal: Sendable {
    private struct State {
        var latest: UInt64 = 0
        var finished = false
        var waiter: CheckedContinuation<Bool, Never>?
    }

    private let state = Mutex(State())

    /// Called by the committing thread after each publication: never blocks.
    func publish(_ version: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.latest = max(state.latest, version)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: true)
    }

    /// Ends every wait, now and later.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: false)
    }

    /// Waits until a version after `version` is published (true) or the signal finishes
    /// or the task is cancelled (false).
    func wait(after version: UInt64) async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let ready: Bool? = state.withLock { state in
                    if state.finished { return false }
                    if state.latest > version { return true }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
