// Observed queries: `store.observe { context in … }` is an AsyncSequence of a query's
// value, current first, then again after each durable commit that wrote inside what the
// query read.
//
// Invariants:
//  Observation.V1. Every value is computed on a read-only context at a published version, so it never
//      shows a state a crash could take away (in `.full` durability), and values come in
//      version order.
//  Observation.V2. A commit never waits for an observer: publishing tests the commit's keys against
//      each waiting query's read set (two key comparisons when they lie apart) and wakes
//      only the queries it met. A slow consumer gets the latest value, not a backlog: the
//      stream buffers one value, and commits made while a value is computed or waiting
//      are folded into the next computation.
//  Observation.V3. The observation ends when the consuming task stops iterating (or is cancelled),
//      when the query throws (the sequence throws it), or when the store closes.
//  Observation.V4. A query runs again exactly when a commit after the version it read wrote a key in
//      its read set (every key it looked up and range it walked: Context.C5), or
//      when a commit was published while it ran (it may have read before or after it):
//      a commit that wrote nothing it read cannot change its value, so it does not run.
import StrataEngine
import StrataWAL
import Synchronization

/// The values of an observed query (`Store.observe`): the current one first, then one
/// after each durable commit that wrote inside what it read.
public struct StoreObservation<Value: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Value
    let stream: AsyncThrowingStream<Value, any Error>
    /// The value computed before `Store.observeImmediately` returned (nil for `observe`,
    /// whose sequence yields the current value first).
    public let initialValue: Value?

    public func makeAsyncIterator() -> AsyncThrowingStream<Value, any Error>.Iterator { stream.makeAsyncIterator() }
}

extension Store {
    /// Observes `query`: yields its value on a read-only context at the latest version,
    /// then again after each durable commit that wrote inside what the query read (Observation.V4; a
    /// value equal to the last one yielded is not repeated). The query runs on a task of
    /// its own, never on the committing thread. A consumer that falls behind gets the latest
    /// value (Observation.V2). Ends as Observation.V3 says.
    public func observe<Value: Sendable & Equatable>(
        _ query: @escaping @Sendable (Context) throws -> Value
    ) -> StoreObservation<Value> {
        observe(query, isNew: { $0 != $1 }, first: nil)
    }

    /// `observe` for a value that is not `Equatable`: yields after every commit that wrote
    /// inside what the query read.
    public func observe<Value: Sendable>(
        _ query: @escaping @Sendable (Context) throws -> Value
    ) -> StoreObservation<Value> {
        observe(query, isNew: { _, _ in true }, first: nil)
    }

    /// `observe`, with the current value computed now, on the caller's thread, before this
    /// returns (`StoreObservation.initialValue`), as a view that must show something at once
    /// needs: the sequence then yields the values after it. Throws what `query` throws.
    public func observeImmediately<Value: Sendable & Equatable>(
        _ query: @escaping @Sendable (Context) throws -> Value
    ) throws -> StoreObservation<Value> {
        // Listed with the feed before the first run, so that a commit published while it
        // runs is due for the next (a signal listed after it never heard of that commit,
        // and the sequence kept the first value until a later commit).
        let signal = ObservationSignal()
        let id = feed.add(signal)
        let value: Value
        do { value = try Self.run(query, signal: signal, store: self) } catch {
            feed.remove(signal: id)
            throw error
        }
        return observe(query, isNew: { $0 != $1 }, first: (value, signal, id))
    }

    /// How many observed queries are running (each ends as Observation.V3 says).
    public var observationCount: Int { feed.signalCount }

    /// Runs `query` once for `signal`: on a new read-only context that notes what it reads,
    /// and then hands the signal that read set and the version it read (Observation.V4).
    private static func run<Value>(_ query: (Context) throws -> Value, signal: ObservationSignal, store: Store) throws -> Value {
        signal.running()
        let recorder = ReadRecorder()
        let context = store.makeReadOnlyContext(recorder: recorder)
        defer { context.discard() }
        let value = try query(context)
        signal.ran(at: context.version, reading: recorder.readSet)
        return value
    }

    private func observe<Value: Sendable>(_ query: @escaping @Sendable (Context) throws -> Value,
                                          isNew: @escaping @Sendable (Value, Value) -> Bool,
                                          first: (value: Value, signal: ObservationSignal, id: Int)?) -> StoreObservation<Value> {
        let (stream, continuation) = AsyncThrowingStream<Value, any Error>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let signal = first?.signal ?? ObservationSignal()
        let id = first?.id ?? feed.add(signal)
        let task = Task.detached { [self] in
            var last = first?.value
            defer { feed.remove(signal: id) }
            // An immediate observation has its first value already: it waits first.
            if first != nil { guard await signal.wait() else { return continuation.finish() } }
            while !Task.isCancelled {
                do {
                    let value = try Self.run(query, signal: signal, store: self)
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
                guard await signal.wait() else { break }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in
            task.cancel()
            signal.finish()
        }
        return StoreObservation(stream: stream, initialValue: first?.value)
    }
}

/// What an observed query waits on (Observation.V4): the read set of its last run and the version it
/// read, and the newest commit since that may change its value.
final class ObservationSignal: Sendable {
    private struct State {
        /// nil while the query runs.
        var readSet: ReadSet?
        /// The version the last run read.
        var seen: UInt64 = 0
        /// The newest commit that wrote in the read set or was published during a run.
        var due: UInt64 = 0
        var finished = false
        var waiter: CheckedContinuation<Bool, Never>?
    }

    private let state = Mutex(State())

    /// The query starts a run: commits published until it ends count as due.
    func running() {
        state.withLock { $0.readSet = nil }
    }

    /// The query's run read `readSet` at `version`.
    func ran(at version: UInt64, reading readSet: ReadSet) {
        state.withLock { state in
            state.readSet = readSet
            state.seen = version
        }
    }

    /// Called by the committing thread after each publication with its batches (each with
    /// its keys and their bounds): never blocks, and wakes the waiting query only when a
    /// batch is due for it (Observation.V2, Observation.V4).
    func publish(_ batches: [PublishedBatch]) {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            for batch in batches where batch.version > state.seen {
                guard let readSet = state.readSet else {
                    state.due = max(state.due, batch.version)
                    continue
                }
                if readSet.meets(batch.keys, lowest: batch.lowest, highest: batch.highest) { state.due = max(state.due, batch.version) }
            }
            guard state.due > state.seen else { return nil }
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

    /// Waits until a commit is due (true) or the signal finishes or the task is cancelled
    /// (false).
    func wait() async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let ready: Bool? = state.withLock { state in
                    if state.finished { return false }
                    if state.due > state.seen { return true }
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

/// A published commit as observed queries test it: its version, its keys, and their
/// smallest and largest.
struct PublishedBatch: Sendable {
    let version: UInt64
    let keys: [[UInt8]]
    let lowest: [UInt8]
    let highest: [UInt8]

    init?(version: UInt64, batch: WALBatch) {
        let keys = batch.operations.map(\.key)
        guard let first = keys.first else { return nil }
        var (lowest, highest) = (first, first)
        for key in keys.dropFirst() {
            if compareKeys(key, lowest) < 0 { lowest = key }
            if compareKeys(key, highest) > 0 { highest = key }
        }
        self.version = version
        self.keys = keys
        self.lowest = lowest
        self.highest = highest
    }
}
