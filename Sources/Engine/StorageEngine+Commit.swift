// Committing a batch: conflict check against everything committed after the batch's
// snapshot (first committer wins), one log frame through group commit, and publication
// in version order once the frame is durable (StorageEngine.E1).
import StrataWAL

extension StorageEngine {
    /// Commits `batch` as read at `snapshot`. Returns once the batch is durable (`.full`)
    /// or written (`.relaxed`) and visible to new snapshots. Blocks the calling thread
    /// meanwhile; from async code use `commit(_:readAt:) async`.
    /// Throws `EngineError.conflict` naming the keys another commit wrote after the
    /// snapshot, `.keyTooLarge` / `.valueTooLarge`, `.storeFailed`, `.closed`, or `.log`
    /// (`commitOutcomeUnknown` when the frame's fdatasync failed).
    @discardableResult
    public func commit(_ batch: WALBatch, readAt snapshot: Snapshot) throws -> CommitResult {
        try finishCommit(submit(batch, readVersion: snapshot.version))
    }

    /// `commit(_:readAt:)` whose conflict check leaves out the keys in `unchecked`: writes
    /// whose value does not depend on what was read, so the last one may simply win (the
    /// record layer's index manifests, which every writer of a type writes alike). A key in
    /// one of `readRanges` written by another commit after the snapshot is a conflict too,
    /// though this batch does not write it: the batch depends on what those ranges held
    /// (a relationship's target, the referrers a delete rule saw).
    @discardableResult
    public func commit(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>,
                       readRanges: [KeyRange] = []) throws -> CommitResult {
        try finishCommit(submit(batch, readVersion: snapshot.version, unchecked: unchecked, readRanges: readRanges))
    }

    /// Commits `batch` without a conflict check (a blind write: it read nothing, so the
    /// last writer of each key wins). Throws as `commit(_:readAt:)` does, except conflicts.
    @discardableResult
    public func commit(_ batch: WALBatch) throws -> CommitResult {
        try finishCommit(submit(batch, readVersion: nil))
    }

    /// `commit(_:readAt:)` for async code: suspends (never blocking a thread of the
    /// cooperative pool) while a dedicated thread waits for the fdatasync. Cancelling the
    /// task does not cancel a commit already submitted to the log.
    @discardableResult
    public func commit(_ batch: WALBatch, readAt snapshot: Snapshot) async throws -> CommitResult {
        try await commit(batch, readAt: snapshot, unchecked: [])
    }

    /// `commit(_:readAt:unchecked:readRanges:)` for async code, as `commit(_:readAt:) async`.
    @discardableResult
    public func commit(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>,
                       readRanges: [KeyRange] = []) async throws -> CommitResult {
        let submission: Submission
        do {
            submission = try beginCommit(batch, readVersion: snapshot.version, unchecked: unchecked, readRanges: readRanges)
        } catch let unsettled as UnsettledConflict {
            // Settled on the waiter's thread, never on the cooperative pool's.
            let waiter = try writableLog().waiter
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                waiter.enqueue(LSN(unsettled.through)) { [self] in
                    settle(through: unsettled.through)
                    continuation.resume()
                }
            }
            throw unsettled.conflict
        }
        let waiter = try writableLog().waiter
        return try await withCheckedThrowingContinuation { continuation in
            waiter.enqueue(submission.lsn) { [self] in
                continuation.resume(with: Result { try finishCommit(submission) })
            }
        }
    }

    /// `beginCommit`, and for a conflict with commits still in flight, the wait until they
    /// are published (`UnsettledConflict`) before the conflict is thrown.
    private func submit(_ batch: WALBatch, readVersion: UInt64?, unchecked: Set<[UInt8]> = [],
                        readRanges: [KeyRange] = []) throws -> Submission {
        do {
            return try beginCommit(batch, readVersion: readVersion, unchecked: unchecked, readRanges: readRanges)
        } catch let unsettled as UnsettledConflict {
            settle(through: unsettled.through)
            throw unsettled.conflict
        }
    }

    /// Waits until every commit through `version` is durable, then publishes them: a
    /// conflict with one of them is thrown only after it, so that the caller's retry reads
    /// a snapshot that holds it. (Retried at once, a unit of work met the same unpublished
    /// commit again and again while that commit's fdatasync ran, and a test's writer used
    /// up a thousand retries on one key.) A failed log publishes nothing; the retry's
    /// commit reports the failure.
    private func settle(through version: UInt64) {
        guard let log = try? writableLog().log, (try? log.waitUntilDone(LSN(version))) != nil else { return }
        publish(through: version)
    }

    /// Checks conflicts and limits, takes the next version and queues the batch's frame.
    /// A blind write (no `readVersion`) hashes no key: only a commit that read checks,
    /// against the batches still in flight and the versions the memtables and tree hold.
    private func beginCommit(_ batch: WALBatch, readVersion: UInt64?, unchecked: Set<[UInt8]> = [],
                             readRanges: [KeyRange] = []) throws -> Submission {
        let log = try writableLog().log
        let measure = batch.measure
        try Self.checkLimits(measure)
        guard measure.encodedByteCount <= WALFormat.maxBatchBytes else {
            throw EngineError.log(.batchTooLarge(byteCount: measure.encodedByteCount, limit: WALFormat.maxBatchBytes))
        }
        // Encoded once, before the lock: the log stores these bytes and the memtable links
        // from them, reading each key and value where it lies. A batch with version stamps
        // is encoded under the lock, once its version is known (WALBatch.versionStampedOperations).
        // A batch larger than one log frame is never encoded whole: the log encodes it a
        // fragment at a time, under the lock (where it compresses every batch), and the
        // memtable links it from its operations.
        let unstampedEncoding = batch.versionStampedOperations.isEmpty && !measure.spansFrames
            ? batch.encoding(measure: measure) : nil
        return try commitLock.withLock { commits in
            guard !commits.closed else { throw EngineError.closed }
            if let failure = commits.failure { throw EngineError.storeFailed(reason: failure) }
            if let readVersion {
                var keys = Set(batch.operations.map(\.key))
                if !unchecked.isEmpty { keys.subtract(unchecked) }
                var conflicts = Set<[UInt8]>()
                // Every in-flight batch is newer than any published snapshot.
                for other in commits.inFlight {
                    for operation in other.operations where keys.contains(operation.key) { conflicts.insert(operation.key) }
                }
                let latest = snapshots.current
                for key in keys where !conflicts.contains(key) {
                    if try wasWritten(key, after: readVersion, state: latest) { conflicts.insert(key) }
                }
                for range in readRanges {
                    for other in commits.inFlight {
                        for operation in other.operations where range.contains(operation.key) { conflicts.insert(operation.key) }
                    }
                    conflicts.formUnion(try latest.keysWritten(in: range, after: readVersion, file: pageFile))
                }
                guard conflicts.isEmpty else {
                    let conflict = EngineError.conflict(keys: conflicts.sorted { compareKeys($0, $1) < 0 }, readVersion: readVersion)
                    // Some of what it conflicts with may not be published yet (in flight, or
                    // linked ahead of its fdatasync).
                    guard commits.lastEnqueuedVersion > commits.publishedVersion else { throw conflict }
                    throw UnsettledConflict(conflict: conflict, through: commits.lastEnqueuedVersion)
                }
            }
            // The log is enqueued only here, under this lock, so its next LSN is this batch's
            // version. Stamping changes bytes, not lengths: the measure holds.
            let stampedVersion = unstampedEncoding == nil && !batch.versionStampedOperations.isEmpty ? log.nextLSN.rawValue : nil
            let batch = stampedVersion.map(batch.stampingVersion) ?? batch
            // Linked while the frame is written and synced; unseen until published (StorageEngine.E1).
            let submission: Submission
            do {
                if measure.spansFrames {
                    submission = try log.enqueue(batch, measure: measure)
                    applier.enqueue(operationsOf: batch, version: submission.lsn.rawValue, into: snapshots.current.active)
                } else {
                    let encoding = unstampedEncoding ?? batch.encoding(measure: measure)
                    submission = try log.enqueue(encoding)
                    applier.enqueue(encoding, version: submission.lsn.rawValue, into: snapshots.current.active)
                }
            } catch let error as WALError {
                if case .batchTooLarge = error { throw EngineError.log(error) }
                commits.failure = "\(error)"
                throw EngineError.log(error)
            }
            let version = submission.lsn.rawValue
            precondition(stampedVersion == nil || stampedVersion == version, "a batch was stamped with another version than its own")
            precondition(version == commits.publishedVersion + UInt64(commits.inFlight.count) + 1,
                         "a commit's version does not follow the batches in flight")
            commits.inFlight.append(batch)
            commits.lastEnqueuedVersion = version
            lastEnqueuedVersion.store(version, ordering: .relaxed)
            return submission
        }
    }

    /// Waits for the queued frame to be durable, then publishes it (StorageEngine.E1).
    private func finishCommit(_ submission: Submission) throws -> CommitResult {
        let groupSize: Int
        do {
            groupSize = try writableLog().log.waitUntilDone(submission.lsn)
        } catch {
            commitLock.withLock { $0.failure = "\(error)" }
            throw (error as? WALError).map(EngineError.log) ?? error
        }
        publish(through: submission.lsn.rawValue)
        checkpointIfDue()
        armIdleCheckpoint()
        return CommitResult(version: submission.lsn.rawValue, rawByteCount: submission.rawByteCount,
                            storedByteCount: submission.storedByteCount, groupSize: groupSize)
    }

    package static func checkLimits(_ batch: WALBatch) throws(EngineError) {
        try checkLimits(batch.measure)
    }

    /// Checks a batch's limits on its measure (`WALBatch.measure`).
    static func checkLimits(_ measure: WALBatch.Measure) throws(EngineError) {
        // An empty batch encodes to its 4-byte count alone; any other holds a key.
        if measure.encodedByteCount > 4 && measure.shortestKeyBytes == 0 {
            throw .keyTooLarge(byteCount: 0, limit: Limits.maxKeyBytes)
        }
        guard measure.longestKeyBytes <= Limits.maxKeyBytes else {
            throw .keyTooLarge(byteCount: measure.longestKeyBytes, limit: Limits.maxKeyBytes)
        }
        guard measure.longestValueBytes <= Limits.maxValueBytes else {
            throw .valueTooLarge(byteCount: measure.longestValueBytes, limit: Limits.maxValueBytes)
        }
    }

    /// Whether a commit after `readVersion` wrote `key`: its newest node in either
    /// memtable (published or not), or else its entry in the tree (tombstones keep their
    /// version there, so deletes conflict too), read only when the tree holds changes
    /// newer than `readVersion`. Nearly every commit reads at or above the
    /// tree's version, and then no page is touched: a record store's inserts read a leaf
    /// of every index they wrote, and each stayed resident.
    private func wasWritten(_ key: [UInt8], after readVersion: UInt64, state: EngineState) throws -> Bool {
        if let entry = state.active.entry(key) ?? state.frozen?.entry(key) { return entry.version > readVersion }
        guard state.treeVersion > readVersion else { return false }
        return try (state.tree.entry(key, file: pageFile)?.version ?? 0) > readVersion
    }

    /// Publishes every in-flight batch up to `version` in order (all durable by now): once
    /// the applier has linked them into their memtable, where snapshots older than them
    /// skip them by version, makes the new version current.
    func publish(through version: UInt64) {
        applier.waitUntilApplied(version)
        commitLock.withLock { commits in
            guard commits.publishedVersion < version else { return }
            // The in-flight batches are those of the versions after the published one, in order.
            let first = commits.publishedVersion + 1
            let count = min(Int(version - commits.publishedVersion), commits.inFlight.count)
            commits.publishedVersion = first + UInt64(count) - 1
            let published = commits.publishedVersion
            snapshots.publish { $0.with(version: published) }
            // Readers in other processes read the log up to here (ReaderTable.swift).
            readerTable?.publish(version: published)
            // Still under the commit lock, so observers see versions in order.
            if count > 0, let observer = publishObserver.withLock({ $0 }) {
                observer.observe(PublishedBatches(firstVersion: first, batches: commits.inFlight[..<count]))
            }
            commits.inFlight.removeFirst(count)
        }
    }
}

/// What a durable commit did.
public struct CommitResult: Sendable, Equatable {
    /// The version the commit created (its log LSN).
    public let version: UInt64
    /// Bytes of the encoded batch.
    public let rawByteCount: Int
    /// Bytes of its log frames' payloads as stored (after LZ4 where it helped).
    public let storedByteCount: Int
    /// How many commits shared the write and fdatasync of this one's group (0 when unknown).
    public let groupSize: Int

    /// What a backend other than the engine reports of its commit (StrataEtcd).
    package init(version: UInt64, rawByteCount: Int, storedByteCount: Int, groupSize: Int) {
        self.version = version
        self.rawByteCount = rawByteCount
        self.storedByteCount = storedByteCount
        self.groupSize = groupSize
    }
}

/// A conflict found while commits were in flight: thrown by `beginCommit`, and turned into
/// `conflict` once every commit through `through` is published (`settle(through:)`).
private struct UnsettledConflict: Error {
    let conflict: EngineError
    let through: UInt64
}
