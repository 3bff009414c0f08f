// A store over etcd. The keys of a store live in etcd under its prefix; this process keeps
// a replica of them in an in-memory `StorageEngine`, loaded at one revision when the store
// opens and moved forward by etcd's Watch one revision at a time (one local commit per
// etcd revision). Contexts read the replica, so reads never wait for the network.
//
// Versions: the replica's own versions, one per etcd revision that changed the prefix.
// `revisions` maps each to its etcd revision; a commit uses it to check the keys it
// writes against etcd's current state.
//
// A root commit is one etcd transaction: for every key the context may have read (every
// written key outside `unchecked`), compare its current mod_revision with what it was at
// the snapshot's revision R: for a key present at R, 0 < mod_revision < R + 1 (so neither
// changed nor deleted since); for a key absent at R, mod_revision = 0 (not created since).
// Then the puts and deletes. When a compare fails nothing is written, the failure branch's
// reads name the keys that changed, and the conflict is thrown once the replica has applied
// the latest of those changes (so a retry reads them). When it succeeds the commit returns
// once the replica has applied the transaction's revision (read-your-writes); one that
// changed nothing (its deletes found no key) makes no revision and returns at once.
//
// Invariants:
//  EtcdBackend.E1. Only the applier queue commits to the replica, in etcd revision order; each local
//      version's revision is recorded before the version is published.
//  EtcdBackend.E2. A transaction is sent at most once; after it may have reached a server its outcome
//      is either read from the answer or reported unknown, never guessed.
import AsyncHTTPClient
import Dispatch
import Foundation
import Logging
import NIOCore
import StrataContexts
import StrataEngine
import StrataFileIO
import StrataWAL
import Synchronization

final class EtcdBackend: StorageBackend {
    let localEngine: StorageEngine
    let client: EtcdClient
    let prefix: [UInt8]
    private let prefixEnd: [UInt8]
    private let applier = DispatchQueue(label: "strata.etcd.apply")
    private let state: Mutex<State>
    private let logger = Logger(label: "strata")
    /// Set when the store compacts etcd's history itself (`EtcdOptions.compaction`).
    let compactor: EtcdCompactor?
    /// etcd's cluster id, as its answers give it.
    private let cluster: String

    private struct State {
        /// `revisions[i]` is the etcd revision of local version `firstVersion + i` (EtcdBackend.E1).
        var revisions: [Int64]
        var firstVersion: UInt64
        /// The last revision the replica shows.
        var appliedRevision: Int64
        /// Commits waiting for the replica to reach their revision.
        var waiters: [(revision: Int64, resume: @Sendable () -> Void)] = []
        var watch: HTTPClient.Task<Void>?
        /// Which watch is current: messages and ends of older ones are ignored.
        var watchID = 0
        /// Why the replica stopped following etcd (it could not apply a revision).
        var failure: String?
        var closed = false
    }

    var location: String { "etcd \(client.endpoints.joined(separator: ",")) prefix \(renderPrefix)" }

    private var renderPrefix: String { String(decoding: prefix, as: UTF8.self) }

    /// Loads the prefix at etcd's current revision into a new replica and starts watching.
    static func open(client: EtcdClient, prefix: [UInt8]) async throws -> (EtcdBackend, RecoveryReport) {
        var options = EngineOptions()
        options.log.segmentBytes = StorageEngine.inMemorySegmentBytes
        // The replica's history lives in memory, as an in-memory store's does.
        options.log.history.bytes = 4 * StorageEngine.inMemorySegmentBytes
        let (replica, report) = try StorageEngine.open(path: "/strata-etcd-replica", fileSystem: SimulatedFileSystem(), options: options)
        let revision: Int64, cluster: String
        do {
            // Off the cooperative pool: the load blocks its thread on each page.
            let (pairs, loaded, id) = try await withCheckedThrowingContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(with: Result { try load(client: client, prefix: prefix) }) }
            }
            revision = loaded
            cluster = id
            for start in stride(from: 0, to: pairs.count, by: 1000) {
                let page = pairs[start..<min(start + 1000, pairs.count)]
                try replica.commit(WALBatch(page.map { .put(key: $0.key, value: $0.value) }))
            }
            if client.options.credentials != nil {
                try await checkWritePermission(client: client, prefix: prefix)
            }
        } catch {
            try? replica.close(checkpoint: false)
            throw error
        }
        let backend = EtcdBackend(replica: replica, client: client, prefix: prefix, revision: revision, cluster: cluster)
        // Until its watch is created, the store needs etcd's history from the next revision.
        EtcdCompactor.need(revision + 1, on: cluster, by: ObjectIdentifier(backend))
        // On the applier queue, as every later start: it may wait for a token.
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            backend.applier.async { continuation.resume(with: Result { try backend.startWatch(after: revision) }) }
        }
        backend.compactor?.start()
        return (backend, report)
    }

    /// Whether the user's roles let it write the prefix, asked before the first commit: a
    /// transaction whose compare never holds (no key's mod_revision is below 0) and whose
    /// success branch puts the prefix's first key. etcd checks every operation of both
    /// branches against the user's permissions before it evaluates a compare, so a role
    /// without write is refused, and with write nothing is written and no revision made.
    private static func checkWritePermission(client: EtcdClient, prefix: [UInt8]) async throws {
        let probe = TxnRequest(compare: [Compare(key: EtcdBytes(prefix), result: .LESS, mod_revision: EtcdInt(0))],
                               success: [RequestOp(request_put: PutRequest(key: EtcdBytes(prefix), value: EtcdBytes([])))],
                               failure: [])
        let response = try await client.probe(try client.encode(probe)).get()
        guard response.succeeded != true else {
            throw EtcdError.badResponse("a compare of mod_revision < 0 held on \(String(decoding: prefix, as: UTF8.self))")
        }
    }

    private init(replica: StorageEngine, client: EtcdClient, prefix: [UInt8], revision: Int64, cluster: String) {
        localEngine = replica
        self.cluster = cluster
        self.client = client
        self.prefix = prefix
        prefixEnd = Self.rangeEnd(of: prefix)
        state = Mutex(State(revisions: [revision], firstVersion: replica.version, appliedRevision: revision))
        compactor = client.options.compaction.map { EtcdCompactor(client: client, prefix: prefix, settings: $0) }
    }

    deinit { EtcdCompactor.release(ObjectIdentifier(self)) }

    /// The end of the range of keys starting with `prefix` (etcd's "prefix end"); `[0]`,
    /// etcd's "every key above", for a prefix of 0xFF bytes only.
    static func rangeEnd(of prefix: [UInt8]) -> [UInt8] { keyAfterPrefix(prefix) ?? [0] }

    // MARK: Watching

    /// Watches the prefix from `revision + 1`. Called on open, then on the applier queue.
    private func startWatch(after revision: Int64) throws {
        let request = WatchRequest(create_request: WatchCreateRequest(key: EtcdBytes(prefix), range_end: EtcdBytes(prefixEnd),
                                                                      start_revision: EtcdInt(revision + 1)))
        let id = state.withLock { state in
            state.watchID += 1
            return state.watchID
        }
        let task = try client.watch(request) { [weak self] message in
            guard let self else { return }
            self.applier.async { self.handle(message, watch: id) }
        }
        let current = state.withLock { state in
            guard !state.closed, state.watchID == id else { return false }
            state.watch = task
            return true
        }
        guard current else { return task.cancel() }
        task.futureResult.whenComplete { [weak self] result in
            guard let self else { return }
            self.applier.async { self.watchEnded(result, watch: id) }
        }
    }

    /// A stream ended (etcd restarted, a connection dropped): watch again from the last
    /// applied revision after a pause, unless the store closed or another watch took over.
    private func watchEnded(_ result: Result<Void, any Error>, watch id: Int) {
        let (current, applied) = state.withLock { (!$0.closed && $0.watchID == id, $0.appliedRevision) }
        guard current else { return }
        // Until the next watch is created, the store needs etcd's history after `applied`.
        EtcdCompactor.need(applied + 1, on: cluster, by: ObjectIdentifier(self))
        logger.warning("etcd watch ended; watching again", metadata: ["prefix": "\(renderPrefix)", "revision": "\(applied)"])
        applier.asyncAfter(deadline: .now() + .milliseconds(200)) { [weak self] in
            guard let self, self.state.withLock({ !$0.closed && $0.watchID == id }) else { return }
            do { try self.startWatch(after: applied) } catch {
                // startWatch made its own watch current before it failed (getting a token,
                // say): retry as that one, or nothing would watch again.
                self.watchEnded(.failure(error), watch: self.state.withLock { $0.watchID })
            }
        }
    }

    /// The revisions after the replica's were compacted away, so the watch cannot resume:
    /// load the prefix at etcd's current revision, apply the difference as one commit, and
    /// watch from there. Runs on the applier queue.
    private func resynchronize(watch id: Int) {
        guard !state.withLock({ $0.closed }) else { return }
        state.withLock { state in
            guard state.watchID == id else { return }
            state.watchID += 1
            state.watch?.cancel()
        }
        do {
            let (remote, revision, _) = try Self.load(client: client, prefix: prefix)
            let local = try localEngine.snapshot().scan()
            var batch = WALBatch()
            var (i, j) = (0, 0)
            while i < local.count || j < remote.count {
                if j == remote.count || (i < local.count && local[i].key.lexicographicallyPrecedes(remote[j].key)) {
                    batch.operations.append(.delete(key: local[i].key))
                    i += 1
                } else if i == local.count || remote[j].key.lexicographicallyPrecedes(local[i].key) {
                    batch.operations.append(.put(key: remote[j].key, value: remote[j].value))
                    j += 1
                } else {
                    if local[i].value != remote[j].value { batch.operations.append(.put(key: remote[j].key, value: remote[j].value)) }
                    i += 1
                    j += 1
                }
            }
            if batch.operations.isEmpty {
                state.withLock { $0.appliedRevision = max($0.appliedRevision, revision) }
            } else {
                apply(batch, revision: revision)
            }
            logger.warning("etcd replica reloaded after compaction", metadata: ["revision": "\(revision)", "changes": "\(batch.operations.count)"])
            try startWatch(after: revision)
        } catch {
            logger.error("etcd replica could not be reloaded; trying again", metadata: ["error": "\(error)"])
            let next = state.withLock { $0.watchID }
            applier.asyncAfter(deadline: .now() + .seconds(1)) { [weak self] in self?.resynchronize(watch: next) }
        }
    }

    /// The prefix's keys (without the prefix) and values at etcd's current revision, in
    /// pages of 1,000, every page at the first page's revision.
    private static func load(client: EtcdClient, prefix: [UInt8]) throws -> ([(key: [UInt8], value: [UInt8])], Int64, cluster: String) {
        let end = rangeEnd(of: prefix)
        var pairs: [(key: [UInt8], value: [UInt8])] = []
        var revision: Int64 = 0
        var cluster = ""
        var start = prefix
        while true {
            let page = try client.range(RangeRequest(key: EtcdBytes(start), range_end: EtcdBytes(end), limit: EtcdInt(1000),
                                                     revision: revision == 0 ? nil : EtcdInt(revision))).wait()
            if revision == 0 {
                guard let header = page.header?.revision?.value else { throw EtcdError.badResponse("a range answered without a revision") }
                revision = header
                cluster = page.header?.cluster_id?.text ?? ""
            }
            let kvs = page.kvs ?? []
            for kv in kvs {
                guard let key = kv.key.bytes.stripping(prefix) else { throw EtcdError.badResponse("a key outside the prefix") }
                pairs.append((key, kv.value?.bytes ?? []))
            }
            guard page.more == true, let last = kvs.last else { break }
            start = last.key.bytes + [0]
        }
        return (pairs, revision, cluster)
    }

    /// Applies a watch message's events, one local commit per etcd revision (EtcdBackend.E1).
    private func handle(_ message: WatchStreamMessage, watch id: Int) {
        guard state.withLock({ !$0.closed && $0.watchID == id }) else { return }
        guard let response = message.result else {
            if let text = message.error?.text, text.contains("invalid auth token") { client.discardToken() }
            logger.error("etcd watch failed", metadata: ["error": "\(message.error?.text ?? "no result")"])
            state.withLock { $0.watch }?.cancel()
            return
        }
        if response.canceled == true {
            if let compacted = response.compact_revision?.value, compacted > 0 { return resynchronize(watch: id) }
            // A watch refused for its token (etcd 3.4 says "invalid auth token"; other
            // versions "permission denied"): the next one gets another token.
            if client.options.credentials != nil, let reason = response.cancel_reason,
               reason.contains("invalid auth token") || reason.contains("revision of auth store is old") || reason.contains("permission denied") {
                client.discardToken()
            }
            logger.error("etcd watch canceled", metadata: ["reason": "\(response.cancel_reason ?? "")"])
            state.withLock { $0.watch }?.cancel()
            return
        }
        // A live watch gets every later revision from etcd itself: the store needs no
        // history while it runs (a compaction does not touch a synced watcher).
        if response.created == true { EtcdCompactor.release(ObjectIdentifier(self)) }
        var batch = WALBatch()
        var batchRevision: Int64 = 0
        for event in response.events ?? [] {
            let revision = event.kv.mod_revision?.value ?? 0
            if revision != batchRevision, !batch.operations.isEmpty {
                apply(batch, revision: batchRevision)
                batch = WALBatch()
            }
            batchRevision = revision
            guard let key = event.kv.key.bytes.stripping(prefix), !key.isEmpty else { continue }
            if event.type == "DELETE" {
                batch.operations.append(.delete(key: key))
            } else if event.kv.version?.value == 1 {
                // Created by this revision: an insert, which the typed change feed tells
                // from an update (the embedded store logs it for records' keys).
                batch.operations.append(.insert(key: key, value: event.kv.value?.bytes ?? []))
            } else {
                batch.operations.append(.put(key: key, value: event.kv.value?.bytes ?? []))
            }
        }
        if !batch.operations.isEmpty { apply(batch, revision: batchRevision) }
    }

    private func apply(_ batch: WALBatch, revision: Int64) {
        let skip = state.withLock { state in
            guard revision > state.appliedRevision, state.failure == nil else { return true }
            state.revisions.append(revision)
            return false
        }
        guard !skip else { return }
        do { try localEngine.commit(batch) } catch {
            logger.critical("the etcd replica could not apply a revision", metadata: ["revision": "\(revision)", "error": "\(error)"])
            // Commits stop here: the replica no longer shows what etcd holds.
            let waiters = state.withLock { state in
                state.revisions.removeLast()
                state.failure = "the local replica could not apply etcd revision \(revision): \(error); reopen the store"
                defer { state.waiters.removeAll() }
                return state.waiters.map(\.resume)
            }
            for resume in waiters { resume() }
            return
        }
        let ready: [@Sendable () -> Void] = state.withLock { state in
            state.appliedRevision = revision
            let retained = client.options.retainedVersions
            if state.revisions.count > 2 * retained {
                state.revisions.removeFirst(state.revisions.count - retained)
                state.firstVersion = localEngine.version - UInt64(retained) + 1
            }
            let ready = state.waiters.filter { $0.revision <= revision }.map(\.resume)
            state.waiters.removeAll { $0.revision <= revision }
            return ready
        }
        for resume in ready { resume() }
    }

    // MARK: Committing

    func commit(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>, readRanges: [KeyRange]) throws -> CommitResult {
        var attempt = 0
        while true {
            attempt += 1
            let prepared = try prepare(batch, readAt: snapshot, unchecked: unchecked, readRanges: readRanges)
            let response: TxnResponse
            do { response = try client.txn(prepared.body).wait() } catch { throw Self.unwrap(error) }
            let outcome = try outcome(of: response, prepared, snapshot: snapshot)
            guard let revision = outcome.revision else { return unchanged(prepared) }
            let arrived = DispatchSemaphore(value: 0)
            waitForReplica(revision) { arrived.signal() }
            _ = arrived.wait(timeout: .now() + .nanoseconds(Int(client.options.requestTimeout.nanoseconds)))
            if case .eventCounterMoved = outcome, attempt < Self.eventCounterAttempts { continue }
            if let error = outcome.error { throw error }
            return result(prepared, revision: revision)
        }
    }

    func commit(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>,
                readRanges: [KeyRange]) async throws -> CommitResult {
        var attempt = 0
        while true {
            attempt += 1
            let prepared = try prepare(batch, readAt: snapshot, unchecked: unchecked, readRanges: readRanges)
            let response: TxnResponse
            do { response = try await client.txn(prepared.body).get() } catch { throw Self.unwrap(error) }
            let outcome = try outcome(of: response, prepared, snapshot: snapshot)
            guard let revision = outcome.revision else { return unchanged(prepared) }
            await withCheckedContinuation { continuation in waitForReplica(revision) { continuation.resume() } }
            if case .eventCounterMoved = outcome, attempt < Self.eventCounterAttempts { continue }
            if let error = outcome.error { throw error }
            return result(prepared, revision: revision)
        }
    }

    /// Where a store over etcd counts the commits that published outbox events: 8 bytes,
    /// big-endian, the stamp the last of them wrote into its events' keys (FORMAT.md,
    /// "Events"). An etcd revision is not known before its transaction and counts every
    /// prefix's writes, so it cannot stamp a key of that transaction; this counter can,
    /// compared and written by the same transaction.
    static let eventStampKey: [UInt8] = [0xFE, 0x6E]

    /// How many times a commit with events is sent again when only the event counter moved
    /// (another server published meanwhile): its own keys did not conflict, so it retries
    /// itself rather than fail the unit of work.
    static let eventCounterAttempts = 64

    private struct Prepared {
        var body: [UInt8]
        /// The checked keys and whether the snapshot held them, in the failure branch's order.
        var checked: [(key: [UInt8], present: Bool)]
        /// The read ranges, after the checked keys in the failure branch's order.
        var readRanges: [KeyRange]
        var readRevision: Int64
        var changeCount: Int
        /// Whether the transaction puts a key (then it always makes a revision of its own).
        var puts: Bool
        /// For a batch with events: whether the event counter existed, and the revision
        /// it was compared at (its read is the failure branch's last).
        var eventCounter: (present: Bool, revision: Int64)?
    }

    /// Builds the transaction (compares, puts and deletes, and the failure branch's reads),
    /// after the checks that need no round trip: closed, too old, a conflict the replica
    /// already shows, etcd's limits.
    private func prepare(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>,
                         readRanges: [KeyRange]) throws -> Prepared {
        var unchecked = unchecked
        let readRevision = try state.withLock { state throws -> Int64 in
            guard !state.closed else { throw EngineError.closed }
            if let failure = state.failure { throw EngineError.storeFailed(reason: failure) }
            guard snapshot.version >= state.firstVersion else {
                throw EtcdError.snapshotTooOld(version: snapshot.version, oldest: state.firstVersion)
            }
            let index = Int(snapshot.version - state.firstVersion)
            guard index < state.revisions.count else { throw EtcdError.badResponse("version \(snapshot.version) has no revision") }
            return state.revisions[index]
        }
        try StorageEngine.checkLimits(batch)
        let latest = localEngine.snapshot()
        var compares: [Compare] = []
        var batch = batch
        var eventCounter: (present: Bool, revision: Int64)?
        if !batch.versionStampedOperations.isEmpty {
            // The events' stamp: one past the counter as the replica shows it now, and the
            // counter unchanged since then (Self.eventStampKey).
            let stored = try latest.get(Self.eventStampKey)
            guard stored == nil || stored?.count == 8 else { throw EtcdError.badResponse("the event counter holds \(stored!.count) bytes, not 8") }
            let last = stored.map { $0.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } } ?? 0
            let revision = try state.withLock { state throws -> Int64 in
                let index = Int(latest.version - state.firstVersion)
                guard latest.version >= state.firstVersion, index < state.revisions.count else {
                    throw EtcdError.badResponse("version \(latest.version) has no revision")
                }
                return state.revisions[index]
            }
            let stamped = batch.versionStampedOperations
            batch = batch.stampingVersion(last + 1)
            // The stamped keys are new, as the counter's compare vouches: unchecked, as staged.
            unchecked.formUnion(stamped.map { batch.operations[$0].key })
            // The counter is compared below at the replica's latest revision, not the snapshot's.
            unchecked.insert(Self.eventStampKey)
            batch.operations.append(.put(key: Self.eventStampKey, value: withUnsafeBytes(of: (last + 1).bigEndian) { Array($0) }))
            let etcdKey = EtcdBytes(prefix + Self.eventStampKey)
            if stored != nil {
                compares.append(Compare(key: etcdKey, result: .LESS, mod_revision: EtcdInt(revision + 1)))
            } else {
                compares.append(Compare(key: etcdKey, result: .EQUAL, mod_revision: EtcdInt(0)))
            }
            eventCounter = (stored != nil, revision)
        }
        var checked: [(key: [UInt8], present: Bool)] = []
        var known: [[UInt8]] = []
        var success: [RequestOp] = []
        for operation in batch.operations {
            let key = operation.key
            let etcdKey = EtcdBytes(prefix + key)
            if let value = operation.value {
                success.append(RequestOp(request_put: PutRequest(key: etcdKey, value: EtcdBytes(value))))
            } else {
                success.append(RequestOp(request_delete_range: DeleteRangeRequest(key: etcdKey)))
            }
            guard !unchecked.contains(key) else { continue }
            if try latest.wasWritten(key, after: snapshot.version) { known.append(key) }
            let present = try snapshot.contains(key)
            checked.append((key, present))
            if present {
                compares.append(Compare(key: etcdKey, result: .GREATER, mod_revision: EtcdInt(0)))
                compares.append(Compare(key: etcdKey, result: .LESS, mod_revision: EtcdInt(readRevision + 1)))
            } else {
                compares.append(Compare(key: etcdKey, result: .EQUAL, mod_revision: EtcdInt(0)))
            }
        }
        // A read range: no key in it modified after the snapshot's revision (a key deleted
        // from it meanwhile leaves no revision to compare: the replica's own history, checked
        // here, sees the deletes it has applied).
        for range in readRanges {
            known += try latest.keysWritten(in: range, after: snapshot.version)
            compares.append(Compare(key: EtcdBytes(prefix + (range.lower ?? [])), range_end: EtcdBytes(rangeEnd(range)),
                                    result: .LESS, mod_revision: EtcdInt(readRevision + 1)))
        }
        guard known.isEmpty else {
            throw EngineError.conflict(keys: Set(known).sorted { $0.lexicographicallyPrecedes($1) }, readVersion: snapshot.version)
        }
        let limit = client.options.maxTxnOps
        let operations = max(compares.count, success.count)
        guard operations <= limit else { throw EtcdError.tooManyOperations(count: operations, limit: limit) }
        let failure = checked.map { RequestOp(request_range: RangeRequest(key: EtcdBytes(prefix + $0.key), keys_only: true)) }
            + readRanges.map { range in
                RequestOp(request_range: RangeRequest(key: EtcdBytes(prefix + (range.lower ?? [])), range_end: EtcdBytes(rangeEnd(range)),
                                                      keys_only: true))
            }
            + (eventCounter == nil ? [] : [RequestOp(request_range: RangeRequest(key: EtcdBytes(prefix + Self.eventStampKey), keys_only: true))])
        let body = try client.encode(TxnRequest(compare: compares, success: success, failure: failure))
        // The gateway's JSON is larger than the protobuf the server limits: a bound, not a count.
        let estimate = body.count * 3 / 4
        guard estimate <= client.options.maxRequestBytes else {
            throw EtcdError.requestTooLarge(byteCount: estimate, limit: client.options.maxRequestBytes)
        }
        return Prepared(body: body, checked: checked, readRanges: readRanges, readRevision: readRevision, changeCount: batch.operations.count,
                        puts: batch.operations.contains { $0.value != nil }, eventCounter: eventCounter)
    }

    /// What a transaction's answer says.
    private enum Outcome {
        /// It succeeded and changed a key at this revision.
        case applied(Int64)
        /// It succeeded and changed none (its deletes found no key): etcd made no revision,
        /// and the answer's revision is the whole server's, which this prefix's watch may
        /// never reach.
        case unchanged
        /// A compare failed: the conflict, naming the keys the failure branch found changed
        /// since the snapshot, and the latest revision among those changes (nil when they
        /// were all deletes, whose revisions the reads cannot tell).
        case conflict(any Error, seen: Int64?)
        /// A compare failed only because another commit with events moved the event
        /// counter (at `seen`): the commit is sent again once the replica shows it.
        case eventCounterMoved(seen: Int64)

        /// The revision the replica must reach before the commit returns or throws.
        var revision: Int64? {
            switch self {
            case let .applied(revision): revision
            case .unchanged: nil
            case let .conflict(_, seen): seen
            case let .eventCounterMoved(seen): seen
            }
        }

        /// What the commit throws when it is not sent again.
        var error: (any Error)? {
            switch self {
            case .applied, .unchanged: nil
            case let .conflict(error, _): error
            case .eventCounterMoved: EngineError.conflict(keys: [EtcdBackend.eventStampKey], readVersion: 0)
            }
        }
    }

    /// Reads the transaction's answer. A conflict waits, like a success, for the replica to
    /// show what it found (its `seen` revision), so a retry's fresh context reads the keys
    /// that beat it instead of conflicting again on a replica that lags behind etcd.
    private func outcome(of response: TxnResponse, _ prepared: Prepared, snapshot: Snapshot) throws -> Outcome {
        if response.succeeded == true {
            guard let revision = response.header?.revision?.value else {
                // Applied, but at a revision the replica cannot wait for: a read tells what is there.
                throw EtcdError.commitOutcomeUnknown(endpoint: client.endpoints.joined(separator: ", "),
                                                     cause: "the transaction succeeded but its answer has no revision")
            }
            let deleted = (response.responses ?? []).contains { ($0.response_delete_range?.deleted?.value ?? 0) > 0 }
            return prepared.puts || deleted ? .applied(revision) : .unchanged
        }
        let reads = response.responses ?? []
        var changed: [[UInt8]] = []
        var seen: Int64?
        for (index, key) in prepared.checked.enumerated() {
            let kv = index < reads.count ? reads[index].response_range?.kvs?.first : nil
            let modRevision = kv?.mod_revision?.value ?? 0
            let unchanged = key.present ? (modRevision > 0 && modRevision <= prepared.readRevision) : modRevision == 0
            if !unchanged { changed.append(key.key) }
            if modRevision > prepared.readRevision { seen = max(seen ?? 0, modRevision) }
        }
        for (offset, _) in prepared.readRanges.enumerated() {
            let index = prepared.checked.count + offset
            for kv in (index < reads.count ? reads[index].response_range?.kvs : nil) ?? [] where (kv.mod_revision?.value ?? 0) > prepared.readRevision {
                if let key = kv.key.bytes.stripping(prefix) { changed.append(key) }
                seen = max(seen ?? 0, kv.mod_revision?.value ?? 0)
            }
        }
        if let counter = prepared.eventCounter {
            let index = prepared.checked.count + prepared.readRanges.count
            let modRevision = (index < reads.count ? reads[index].response_range?.kvs?.first?.mod_revision?.value : nil) ?? 0
            let unchanged = counter.present ? (modRevision > 0 && modRevision <= counter.revision) : modRevision == 0
            if !unchanged && changed.isEmpty { return .eventCounterMoved(seen: max(seen ?? 0, modRevision)) }
            if modRevision > prepared.readRevision { seen = max(seen ?? 0, modRevision) }
        }
        // Changed back between the compare and the reads: every checked key is a suspect.
        if changed.isEmpty { changed = prepared.checked.map(\.key) + prepared.readRanges.compactMap(\.lower) }
        let conflict = EngineError.conflict(keys: changed.sorted { $0.lexicographicallyPrecedes($1) }, readVersion: snapshot.version)
        return .conflict(conflict, seen: seen)
    }

    /// Calls `resume` once the replica shows `revision` (at once if it does), or when the
    /// store closes or its replica fails. A synchronous commit waits at most
    /// `requestTimeout` for it: the transaction is applied in etcd either way, and a later
    /// context shows it once the watch catches up.
    private func waitForReplica(_ revision: Int64, resume: @escaping @Sendable () -> Void) {
        let now = state.withLock { state in
            guard state.appliedRevision < revision, !state.closed, state.failure == nil else { return true }
            state.waiters.append((revision, resume))
            return false
        }
        if now { resume() }
    }

    /// The result of a transaction that changed nothing: the version the replica shows.
    private func unchanged(_ prepared: Prepared) -> CommitResult {
        CommitResult(version: localEngine.version, rawByteCount: prepared.body.count, storedByteCount: prepared.body.count,
                     groupSize: 1)
    }

    private func result(_ prepared: Prepared, revision: Int64) -> CommitResult {
        let version = state.withLock { state -> UInt64 in
            guard let index = state.revisions.lastIndex(where: { $0 <= revision }) else { return state.firstVersion }
            return state.firstVersion + UInt64(index)
        }
        return CommitResult(version: version, rawByteCount: prepared.body.count, storedByteCount: prepared.body.count,
                            groupSize: 1)
    }

    /// The etcd key just past `range`: its upper bound under the prefix, or the end of the
    /// prefix when it has none.
    private func rangeEnd(_ range: KeyRange) -> [UInt8] {
        range.upper.map { prefix + $0 } ?? prefixEnd
    }

    private static func unwrap(_ error: any Error) -> any Error {
        if let error = error as? GatewayError { return EtcdClient.classify(error, outcomeUnknownAt: nil) }
        return error
    }

    // MARK: Closing

    func close() throws {
        let (watch, waiters) = state.withLock { state in
            state.closed = true
            defer { state.waiters.removeAll() }
            return (state.watch, state.waiters.map(\.resume))
        }
        watch?.cancel()
        for resume in waiters { resume() }
        compactor?.stop()
        applier.sync {}
        EtcdCompactor.release(ObjectIdentifier(self))
        try localEngine.close(checkpoint: false)
    }
}

extension Array where Element == UInt8 {
    /// The bytes after `prefix`, or nil when they do not start with it.
    func stripping(_ prefix: [UInt8]) -> [UInt8]? {
        guard starts(with: prefix) else { return nil }
        return Array(self[prefix.count...])
    }
}
