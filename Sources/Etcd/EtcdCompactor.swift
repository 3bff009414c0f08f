// Compaction of etcd's history by the stores themselves (`EtcdOptions.compaction`, opt-in).
//
// etcd keeps every revision of every key until it is compacted. A store needs history
// only to resume its watch once it ended (from the revision after the last one its replica
// applied); contexts read the replica, commits compare against etcd's current state, and a
// live watch is sent every later revision whatever is compacted. So a store may compact
// below the oldest revision a store of this process is waiting to resume from (its watch
// ended and not yet created again; a live, idle watch pins nothing), and below a retention
// floor the operator chooses, in revisions and in time: a store (of any process) whose watch
// is down for longer than the floor reloads its replica (a full read of its prefix) instead
// of resuming.
//
// Every `interval`, each store with compaction on reads etcd's current revision R (a
// one-key range of its own prefix, which its role may read) and notes (now, R). It compacts
// to the lowest of: R − retainedRevisions, the revision noted `retention` ago, and the
// oldest revision a store of this process is waiting to resume from; only when that is
// above what it compacted last. Several stores (or processes) compacting is harmless: a
// compaction at or below etcd's last one is refused and ignored.
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// How a store compacts etcd's history when `EtcdOptions.compaction` is set.
public struct EtcdCompaction: Sendable {
    /// The newest revisions always kept (etcd revisions count every write to the cluster,
    /// not only this store's).
    public var retainedRevisions: Int64
    /// How long a revision is kept once it is etcd's newest.
    public var retention: Duration
    /// How often the store compacts.
    public var interval: Duration

    public init(retainedRevisions: Int64 = 10_000, retention: Duration = .seconds(300), interval: Duration = .seconds(60)) {
        self.retainedRevisions = retainedRevisions
        self.retention = retention
        self.interval = interval
    }
}

/// One store's compaction: a timer, the revisions it noted, and what it compacted last.
final class EtcdCompactor: Sendable {
    private let client: EtcdClient
    private let prefix: [UInt8]
    private let settings: EtcdCompaction
    private let queue = DispatchQueue(label: "strata.etcd.compact")
    private let state = Mutex(State())
    private let logger = Logger(label: "strata")

    private struct State {
        /// etcd's revision as noted at each tick, oldest first (those older than
        /// `retention` but the newest of them are dropped).
        var noted: [(time: ContinuousClock.Instant, revision: Int64)] = []
        var compacted: Int64 = 0
        var stopped = false
    }

    /// The revision each store of this process whose watch is down will resume from, and
    /// the etcd cluster it reads (its cluster id: revisions of other clusters do not count).
    private static let needs = Mutex<[ObjectIdentifier: (cluster: String, revision: Int64)]>([:])

    init(client: EtcdClient, prefix: [UInt8], settings: EtcdCompaction) {
        self.client = client
        self.prefix = prefix
        self.settings = settings
    }

    /// The oldest revision a store of this process is waiting to resume its watch from on
    /// `cluster`.
    static func oldestNeed(on cluster: String) -> Int64? {
        needs.withLock { $0.values.filter { $0.cluster == cluster }.map(\.revision).min() }
    }

    /// The revisions stores of this process wait to resume from, on any cluster (tests).
    static var pendingNeeds: [Int64] { needs.withLock { $0.values.map(\.revision) } }

    /// Notes that `store`, whose watch on `cluster` is down, needs etcd's history from
    /// `revision` on.
    static func need(_ revision: Int64, on cluster: String, by store: ObjectIdentifier) {
        needs.withLock { $0[store] = (cluster, revision) }
    }

    static func release(_ store: ObjectIdentifier) {
        _ = needs.withLock { $0.removeValue(forKey: store) }
    }

    /// The revision this compactor compacted last (0 before the first).
    var compactedRevision: Int64 { state.withLock { $0.compacted } }

    func start() { schedule() }

    func stop() { state.withLock { $0.stopped = true } }

    private func schedule() {
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(settings.interval.nanoseconds))) { [weak self] in
            guard let self, !self.state.withLock({ $0.stopped }) else { return }
            self.tick().whenComplete { _ in self.schedule() }
        }
    }

    /// One round: read etcd's revision, choose the target, compact.
    func tick() -> EventLoopFuture<Void> {
                client.range(RangeRequest(key: EtcdBytes(prefix), range_end: EtcdBytes(EtcdBackend.rangeEnd(of: prefix)), limit: EtcdInt(1),
                                  keys_only: true)).flatMap { response in
            let loop = MultiThreadedEventLoopGroup.singleton.any()
            guard let current = response.header?.revision?.value, let cluster = response.header?.cluster_id?.text else {
                return loop.makeSucceededVoidFuture()
            }
            guard let target = self.target(current: current, cluster: cluster, now: .now) else { return loop.makeSucceededVoidFuture() }
            return self.client.compact(target).map { _ in
                self.state.withLock { $0.compacted = max($0.compacted, target) }
                self.logger.debug("etcd history compacted", metadata: ["revision": "\(target)"])
            }.flatMapErrorThrowing { error in
                // etcd compacted past it already (another store, the server's own policy).
                if "\(error)".contains("required revision has been compacted") {
                    self.state.withLock { $0.compacted = max($0.compacted, target) }
                    return
                }
                self.logger.warning("etcd history could not be compacted", metadata: ["revision": "\(target)", "error": "\(error)"])
            }
        }.flatMapErrorThrowing { error in
            self.logger.warning("etcd history could not be compacted", metadata: ["error": "\(error)"])
        }
    }

    /// The revision to compact to, given etcd's `current` one, or nil when nothing may go.
    private func target(current: Int64, cluster: String, now: ContinuousClock.Instant) -> Int64? {
        let oldestNeed = Self.oldestNeed(on: cluster) ?? current
        return state.withLock { state -> Int64? in
            state.noted.append((now, current))
            // Keep the newest noted revision that is older than the retention, and the rest.
            let cutoff = now - settings.retention
            if let expired = state.noted.lastIndex(where: { $0.time <= cutoff }), expired > 0 {
                state.noted.removeFirst(expired)
            }
            guard let floor = state.noted.first, floor.time <= cutoff else { return nil }
            let target = min(current - settings.retainedRevisions, floor.revision, oldestNeed)
            return target > state.compacted && target > 0 ? target : nil
        }
    }
}
