// The change feed: committed change sets delivered to observers as an AsyncSequence, in
// version order, from now or from a version the log still holds.
//
// Invariants:
//  ChangeFeed.F1. A subscriber receives each version after its start exactly once, in order: the
//      log's history up to the version current when it subscribed, then live change sets
//      (which it buffers while it reads the history, dropping versions it already has).
//  ChangeFeed.F2. A commit never waits for a subscriber, and a subscriber's buffer is bounded: one
//      that falls more than its limit behind gets `ChangeFeedError.fellBehind` after
//      the change sets it has, never a gap.
// Thread-safety: the hub and subscribers are guarded by their locks; `publish` runs on a
// committing thread under the engine's commit lock, so it only appends and yields.
import StrataEngine
import StrataLocks
import StrataWAL

/// One committed change: a key and its new value (nil when it was deleted).
public struct Change: Sendable, Equatable {
    public let key: [UInt8]
    public let value: [UInt8]?
    /// Whether the store did not hold the key before this commit. Known for keys staged
    /// with `tracksInsert` (records' keys: the record layer's typed feed reads it).
    package let isInsert: Bool

    public init(key: [UInt8], value: [UInt8]?) {
        self.init(key: key, value: value, isInsert: false)
    }

    init(key: [UInt8], value: [UInt8]?, isInsert: Bool) {
        self.key = key
        self.value = value
        self.isInsert = isInsert
    }

    /// Changes are equal when their keys and values are: `isInsert` is what the record
    /// layer reads, and a backend may know it for more keys than another.
    public static func == (lhs: Change, rhs: Change) -> Bool { lhs.key == rhs.key && lhs.value == rhs.value }
}

/// The changes of one commit.
public struct ChangeSet: Sendable, Equatable {
    /// The version the commit created.
    public let version: UInt64
    /// Its changes in key order.
    public let changes: [Change]

    init(version: UInt64, batch: WALBatch) {
        self.version = version
        self.changes = batch.operations.map { operation in
            switch operation {
            case let .put(key, value): Change(key: key, value: value)
            case let .insert(key, value): Change(key: key, value: value, isInsert: true)
            case let .delete(key): Change(key: key, value: nil)
            }
        }
    }
}

/// Committed change sets, in version order, until the store closes or the task stops
/// iterating. Made by `Store.changes(after:bufferLimit:)`.
public struct ChangeFeed: AsyncSequence, Sendable {
    public typealias Element = ChangeSet
    let stream: AsyncThrowingStream<ChangeSet, any Error>

    public func makeAsyncIterator() -> AsyncThrowingStream<ChangeSet, any Error>.Iterator { stream.makeAsyncIterator() }
}

/// Why a change feed ended early.
public enum ChangeFeedError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The consumer fell more than `bufferLimit` change sets behind the commits (ChangeFeed.F2); it
    /// received every change set up to `lastVersion`.
    case fellBehind(lastVersion: UInt64, bufferLimit: Int)

    public var description: String {
        switch self {
        case let .fellBehind(lastVersion, bufferLimit):
            "The change feed's consumer fell more than \(bufferLimit) change sets behind the commits; it ended after "
                + "version \(lastVersion). Resume with store.changes(after: \(lastVersion)), or raise bufferLimit."
        }
    }
}

extension Store {
    /// The change sets committed after `version` (nil: from now on), in version order.
    /// History comes from the write-ahead log and the history kept beside it
    /// (`WALOptions.history`): throws `EngineError.historyUnavailable` when neither holds
    /// version `version + 1` any more. Reading the
    /// history happens here, before this returns. The feed holds at most `bufferLimit`
    /// change sets beyond the history that the consumer has not taken; past that it ends
    /// with `ChangeFeedError.fellBehind` (ChangeFeed.F2).
    public func changes(after version: UInt64? = nil, bufferLimit: Int = 10_000) throws -> ChangeFeed {
        guard bufferLimit > 0 else { throw UnitOfWorkError.invalidRequest("bufferLimit must be positive (got \(bufferLimit))") }
        // A consumer of changes may come back for history: keep it from now on.
        try engine.keepHistory()
        let subscriber = ChangeFeedSubscriber()
        let id = feed.add(subscriber)
        let current = engine.version
        var history: [ChangeSet] = []
        if let version, version < current {
            do {
                try engine.history((version + 1)...current) { history.append(ChangeSet(version: $0, batch: $1)) }
            } catch {
                feed.remove(id)
                throw error
            }
        }
        let (stream, continuation) = AsyncThrowingStream<ChangeSet, any Error>.makeStream(
            bufferingPolicy: .bufferingOldest(history.count + bufferLimit))
        continuation.onTermination = { [feed] _ in feed.remove(id) }
        subscriber.startLive(continuation, history: history, through: current, bufferLimit: bufferLimit)
        return ChangeFeed(stream: stream)
    }
}

extension Store {
    /// Calls `observer` with every change set committed from now on, in version order,
    /// synchronously on the committing thread right after the commit became durable and
    /// visible (and before the committer returns). It runs under the store's commit lock:
    /// keep it short and do not use the store from it. Returns a token for
    /// `removeObserver`. Package-only: it can hold up commits, which an application's
    /// observers never do (they use `changes(after:)`, `changes(of:since:)` or `observe`);
    /// the crash harness uses it to record exactly what was acknowledged.
    package func observeCommits(_ observer: @escaping @Sendable (ChangeSet) -> Void) -> CommitObservation {
        CommitObservation(id: feed.addObserver(observer))
    }

    /// Stops an observer added by `observeCommits`.
    package func removeObserver(_ observation: CommitObservation) {
        feed.removeObserver(observation.id)
    }
}

/// Identifies an observer added by `Store.observeCommits`.
package struct CommitObservation: Sendable, Hashable {
    let id: Int
}

/// One observer's stream and its position (ChangeFeed.F1, ChangeFeed.F2).
final class ChangeFeedSubscriber: Sendable {
    private struct State {
        var continuation: AsyncThrowingStream<ChangeSet, any Error>.Continuation?
        var buffered: [ChangeSet] = []
        var lastDelivered: UInt64 = 0
        var bufferLimit = 0
        var ended = false
    }

    private let state = Locked(State())

    func deliver(_ changeSet: ChangeSet) {
        state.withLock { state in
            guard !state.ended else { return }
            guard state.continuation != nil else { return state.buffered.append(changeSet) }
            Self.yield(changeSet, into: &state)
        }
    }

    /// Yields `changeSet` unless it was delivered; ends the feed with `fellBehind` when
    /// the buffer is full (ChangeFeed.F2).
    private static func yield(_ changeSet: ChangeSet, into state: inout State) {
        guard changeSet.version > state.lastDelivered, let continuation = state.continuation else { return }
        if case .dropped = continuation.yield(changeSet) {
            state.ended = true
            continuation.finish(throwing: ChangeFeedError.fellBehind(lastVersion: state.lastDelivered,
                                                                     bufferLimit: state.bufferLimit))
            return
        }
        state.lastDelivered = changeSet.version
    }

    /// Yields `history`, then what arrived meanwhile past `version`, and goes live.
    func startLive(_ continuation: AsyncThrowingStream<ChangeSet, any Error>.Continuation, history: [ChangeSet],
                   through version: UInt64, bufferLimit: Int) {
        state.withLock { state in
            state.continuation = continuation
            state.bufferLimit = bufferLimit
            for changeSet in history { Self.yield(changeSet, into: &state) }
            state.lastDelivered = max(state.lastDelivered, version)
            for changeSet in state.buffered where changeSet.version > version { Self.yield(changeSet, into: &state) }
            state.buffered.removeAll()
        }
    }

    func finish() {
        state.withLock { state in
            state.ended = true
            state.continuation?.finish()
        }
    }
}

/// Every subscriber of a store: change feeds, and observers called synchronously.
final class ChangeFeedHub: Sendable {
    private struct Subscribers {
        var nextID = 0
        var byID: [Int: ChangeFeedSubscriber] = [:]
        var observers: [Int: @Sendable (ChangeSet) -> Void] = [:]
        var signals: [Int: ObservationSignal] = [:]
        var watches: [ObjectIdentifier: CommitWatch] = [:]
        var finished = false

        var isEmpty: Bool { byID.isEmpty && observers.isEmpty && signals.isEmpty && watches.isEmpty }
    }

    private let subscribers = Locked(Subscribers())

    func add(_ subscriber: ChangeFeedSubscriber) -> Int {
        register({ $0.byID[$1] = subscriber }, whenFinished: subscriber.finish)
    }

    /// Adds an observed query's signal (Observation.swift); a finished hub finishes it.
    func add(_ signal: ObservationSignal) -> Int {
        register({ $0.signals[$1] = signal }, whenFinished: signal.finish)
    }

    /// Gives the next ID to what `insert` keeps, unless the hub has finished: then calls
    /// `whenFinished` instead.
    private func register(_ insert: (inout Subscribers, Int) -> Void, whenFinished: () -> Void) -> Int {
        let (id, finished) = subscribers.withLock { subscribers in
            subscribers.nextID += 1
            if !subscribers.finished { insert(&subscribers, subscribers.nextID) }
            return (subscribers.nextID, subscribers.finished)
        }
        if finished { whenFinished() }
        return id
    }

    /// Adds a commit watch (CommitWatch.swift); a finished hub finishes it.
    func add(_ watch: CommitWatch) {
        _ = register({ subscribers, _ in subscribers.watches[ObjectIdentifier(watch)] = watch }, whenFinished: watch.finish)
    }

    func remove(watch: CommitWatch) {
        subscribers.withLock { _ = $0.watches.removeValue(forKey: ObjectIdentifier(watch)) }
    }

    func remove(signal id: Int) {
        subscribers.withLock { _ = $0.signals.removeValue(forKey: id) }
    }

    /// How many observed queries are registered (for tests).
    var signalCount: Int { subscribers.withLock { $0.signals.count } }

    func addObserver(_ observer: @escaping @Sendable (ChangeSet) -> Void) -> Int {
        subscribers.withLock { subscribers in
            subscribers.nextID += 1
            subscribers.observers[subscribers.nextID] = observer
            return subscribers.nextID
        }
    }

    func removeObserver(_ id: Int) {
        subscribers.withLock { _ = $0.observers.removeValue(forKey: id) }
    }

    func remove(_ id: Int) {
        subscribers.withLock { _ = $0.byID.removeValue(forKey: id) }
    }

    /// Called with each published run of batches, in version order.
    func publish(_ batches: PublishedBatches) {
        // With nothing subscribed (most commits of most stores), nothing is copied out:
        // the four arrays of the dictionaries' values took this call from ~440
        // instructions of a one-key commit to ~860 (callgrind, strata-bench fillsync).
        guard let listeners = subscribers.withLock({ $0.isEmpty ? nil : Listeners($0) }) else { return }
        if !listeners.watches.isEmpty {
            let entries = Array(batches)
            for watch in listeners.watches { watch.publish(entries) }
        }
        if !listeners.signals.isEmpty {
            let published = batches.compactMap { PublishedBatch(version: $0.version, batch: $0.batch) }
            for signal in listeners.signals { signal.publish(published) }
        }
        guard !listeners.current.isEmpty || !listeners.observers.isEmpty else { return }
        for (version, batch) in batches {
            let changeSet = ChangeSet(version: version, batch: batch)
            for subscriber in listeners.current { subscriber.deliver(changeSet) }
            for observer in listeners.observers { observer(changeSet) }
        }
    }

    /// Who a publication goes to, copied out of the lock.
    private struct Listeners {
        let current: [ChangeFeedSubscriber]
        let observers: [@Sendable (ChangeSet) -> Void]
        let signals: [ObservationSignal]
        let watches: [CommitWatch]

        init(_ subscribers: Subscribers) {
            current = Array(subscribers.byID.values)
            observers = Array(subscribers.observers.values)
            signals = Array(subscribers.signals.values)
            watches = Array(subscribers.watches.values)
        }
    }

    func finishAll() {
        let (all, signals, watches) = subscribers.withLock { subscribers in
            subscribers.finished = true
            defer {
                subscribers.byID.removeAll()
                subscribers.signals.removeAll()
                subscribers.watches.removeAll()
            }
            return (Array(subscribers.byID.values), Array(subscribers.signals.values), Array(subscribers.watches.values))
        }
        for subscriber in all { subscriber.finish() }
        for signal in signals { signal.finish() }
        for watch in watches { watch.finish() }
    }
}
