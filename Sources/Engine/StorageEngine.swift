// The storage engine: an ordered map from byte-string keys to byte-string values with
// snapshots, durable commits through the write-ahead log, checkpoints into a page file,
// and recovery (FORMAT.md; docs/Contexts.md and docs/Durability.md).
//
// A store is a directory: `LOCK` (held while open), `data` (the page file), `wal/`
// (the write-ahead log) and `readers` (the reader table other processes read through;
// ReaderTable.swift). Commits append to the log and land in the active memtable;
// checkpoints fold the memtable into the B+tree copy-on-write and then release log
// segments. Versions are the log's LSNs.
//
// Invariants:
//  StorageEngine.E1. A commit is published (visible to new snapshots) only after its log frame is
//      durable, and in version order.
//  StorageEngine.E2. A checkpoint writes pages only where the durable meta page has free space and no
//      snapshot reads (PageFile.P1); the meta page is written only after those
//      pages are synced, and log segments are released only after the meta page is.
//  StorageEngine.E3. After an I/O failure where memory and disk may disagree, every later write fails
//      with `storeFailed` until the store is reopened.
// Thread-safety: `Sendable`. Readers count their snapshots in per-CPU stripes and take
// the published view's lock only when it changed (SnapshotRegistry.swift), or once per
// memtable when their seeks find it quiet and start a checkpoint thread;
// commits serialize on `commitLock` only to check conflicts and take an LSN; the
// fdatasync wait and the checkpoint's I/O hold neither.
import StrataFileIO
import Foundation
import StrataLocks
import Synchronization
import StrataWAL

/// An open store.
public final class StorageEngine: Sendable, ValueVisitor {
    /// The store's directory.
    public let path: String
    public let options: EngineOptions
    let fileSystem: any FileSystem
    let pageFile: PageFile
    /// The log a writer appends to, or the log as a read-only store read it at open.
    let logAccess: LogAccess
    /// The store's lock, and (for a writer) the exclusive lock on the data file that keeps
    /// read-only openers out.
    private let locks: [any FileLock]

    /// The published view and the snapshots that read it or older ones.
    let snapshots: SnapshotRegistry
    /// Serializes the updates of a read-only store's pin in the reader table.
    let readerPinLock = Locked(())
    /// Conflict checks, LSN order and publication.
    let commitLock: Locked<CommitState>
    /// The durable layout of the data file, owned by the one running checkpoint.
    let checkpointLock: Locked<CheckpointState>
    /// Whether a background checkpoint is running: one a commit's thresholds, a quiet
    /// memtable (`checkpointIfQuiet`) or an idle one (`checkpointIfIdle`) started.
    let checkpointRunning = Atomic(false)
    /// Broadcast when a checkpoint freezes the memtable and when that checkpoint ends:
    /// commits stalled on a full memtable (`EngineOptions.maxMemtableBytes`) wait on it.
    let checkpointEnded = ConditionLock()
    /// Set by a close that will checkpoint: a background checkpoint running then stops
    /// after its next run of pages, and the close folds its memtable with the next one.
    let checkpointStopRequested = Atomic(false)
    /// Background checkpoints that stopped that way.
    let stoppedCheckpoints = Atomic(0)
    /// Whether an idle tick is scheduled (`armIdleCheckpoint`).
    let idleTimerArmed = Atomic(false)
    /// Log bytes written when the last checkpoint started.
    let logBytesAtCheckpoint = Atomic(0)
    /// Checkpoints that ended by giving freed memory back (`EngineOptions.returnsFreedMemory`).
    let freedMemoryReturns = Atomic(0)
    /// Background checkpoints whose writes lowered their thread's priority (`CheckpointPacer`).
    let yieldedCheckpoints = Atomic(0)
    /// The nice value of the thread that published the last checkpoint's tree, under the
    /// locks commits and readers wait for (CheckpointPacer.C1).
    let publishingThreadNice = Atomic(0)
    /// The version of the last commit enqueued (`beginCommit`), read without the commit
    /// lock by a checkpoint's pacer to tell whether commits still come.
    let lastEnqueuedVersion = Atomic<UInt64>(0)
    /// Links each committed batch into its memtable while its frame is being synced.
    let applier: MemtableApplier
    /// Told about every published batch (see `observeCommits`). Boxed: a closure kept
    /// directly in the generic `Locked` and read through its `inout` access gained two
    /// reabstraction thunks per read, so each commit called the observer through a longer
    /// chain (after 20,000 commits, 228 µs of CPU per commit).
    let publishObserver = Locked<CommitObserverBox?>(nil)
    /// Held while history is read, and while a checkpoint or close moves log segments into
    /// it, so that a read never misses a segment on its way from the log to the history.
    let historyLock = Locked(())
    /// The reader table shared with the store's other processes (ReaderTable.swift): the
    /// writer publishes its durable version there and respects the pins of the readers it
    /// lists; nil for a reader that opened without one (read-only media).
    let readerTable: ReaderTable?
    /// A read-only store's slot in that table, pinning what it reads.
    let readerSlot: ReaderSlot?
    /// Serializes a read-only store's moves to newer versions (`refresh()`), and holds the
    /// version through which its frozen memtable holds changes (`moveToNewerTree`).
    let refreshLock = Locked(UInt64(0))
    /// The writer's durable version when this reader last moved (see `refreshIfBehind`).
    let followedWriterVersion = Atomic<UInt64>(0)

    init(path: String, options: EngineOptions, fileSystem: any FileSystem, pageFile: PageFile, logAccess: LogAccess,
         locks: [any FileLock], state: EngineState, checkpoint: CheckpointState, readerTable: ReaderTable? = nil,
         readerSlot: ReaderSlot? = nil) {
        self.path = path
        self.options = options
        self.fileSystem = fileSystem
        self.pageFile = pageFile
        self.logAccess = logAccess
        self.locks = locks
        self.snapshots = SnapshotRegistry(state)
        self.commitLock = Locked(CommitState(publishedVersion: state.version, lastEnqueuedVersion: state.version))
        self.checkpointLock = Locked(checkpoint)
        self.applier = MemtableApplier(appliedVersion: state.version)
        self.readerTable = readerTable
        self.readerSlot = readerSlot
        if let readerTable, readerSlot != nil { followedWriterVersion.store(readerTable.writerVersion, ordering: .relaxed) }
    }

    deinit {
        applier.stop()
        if case let .writer(log, waiter) = logAccess {
            waiter.stop()
            try? log.close()
        }
        try? pageFile.file.close()
        for lock in locks { lock.unlock() }
        readerSlot?.release()
        if case .writer = logAccess { readerTable?.detachWriter() }
    }

    /// Whether the store was opened with `.readOnly`: it never writes a byte.
    public var isReadOnly: Bool { if case .reader = logAccess { true } else { false } }

    /// The log this store appends to, and the thread that waits for its fdatasyncs on
    /// behalf of async commits. Throws `EngineError.readOnly` for a read-only store.
    func writableLog() throws(EngineError) -> (log: WriteAheadLog, waiter: DurabilityWaiter) {
        guard case let .writer(log, waiter) = logAccess else { throw .readOnly(path: path) }
        return (log, waiter)
    }

    /// The log's files: as they stand between group commits, or as read at a read-only open.
    var logExtent: LogExtent {
        switch logAccess {
        case let .writer(log, _): log.extent()
        case let .reader(extent): extent.withLock { $0 }
        }
    }

    /// An in-memory store: the same engine on a private simulated file system that never
    /// crashes. For tests and caches; nothing is written to disk. Log segments live in
    /// memory, so they are capped at `inMemorySegmentBytes`.
    public static func inMemory(options: EngineOptions = EngineOptions()) throws -> StorageEngine {
        var options = options
        options.log.segmentBytes = min(options.log.segmentBytes, inMemorySegmentBytes)
        return try open(path: "/strata", fileSystem: SimulatedFileSystem(), options: options).engine
    }

    /// The version of the data file format this build writes and reads (FORMAT.md).
    public static var dataFormatVersion: UInt16 { MetaPage.version }

    /// The largest log segment of an in-memory store (a preallocated segment is RAM there).
    public static let inMemorySegmentBytes = 1 << 20

    /// A snapshot of the latest published version.
    public func snapshot() -> Snapshot {
        refreshIfBehind()
        let (view, stripe) = snapshots.pin()
        return Snapshot(view: view, engine: self, stripe: stripe)
    }

    /// Calls `body` with the bytes of `key`'s newest committed value where they lie and
    /// returns its result, or returns nil without calling it when `key` has none: what
    /// `snapshot().withValue(forKey:_:)` answers, without making a snapshot. For one-key
    /// reads, many of them from several threads: a snapshot is an object, allocated and
    /// freed, that holds the engine, and its retain and release write a line every reading
    /// thread shares. Taking and ending a snapshot cost 66–77 ns alone and 122–126 ns on
    /// each of two threads; this read of a key in the memtable, 51–55 ns either way. The
    /// span is valid only inside `body`. Throws `EngineError` for a corrupt page,
    /// `EngineError.closed` once the store is closed, or what `body` throws.
    @inlinable
    public func withValue<Result>(forKey key: [UInt8], _ body: (RawSpan) throws -> Result) throws -> Result? {
        try value(forKey: key, body)
    }

    /// Calls `body` with `key`'s newest value where it lies and returns true, or returns
    /// false without calling it when `key` has no value. (The non-generic core of
    /// `withValue`, as `Snapshot.visitValue` is of `Snapshot.withValue`.)
    @usableFromInline
    func visitValue(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        // Closed, every read throws, not only those that reach the tree: a key still in the
        // memtable of a store closed without a checkpoint answered as if it were open.
        guard !pageFile.isClosed else { throw EngineError.closed }
        refreshIfBehind()
        let (view, stripe) = snapshots.pin()
        defer { unpin(view, stripe: stripe) }
        let reader = view._withUnsafeGuaranteedRef { PointReader(view: $0, file: pageFile) }
        return try reader.withValueBytes(key, body) != nil
    }

    /// The latest published version.
    public var version: UInt64 { snapshots.current.version }

    /// A snapshot of `snapshot`'s version whose tree holds more of it, or nil: when no
    /// commit came since it was taken and a checkpoint since folded the memtable it reads
    /// into the tree, the new snapshot reads the same pairs from the tree alone, where a
    /// walk merges no memtable's keys with the tree's. `publications` is the count of
    /// published views the caller saw at its last call (start with 0): while nothing was
    /// published since, a call costs one atomic load.
    package func snapshot(newerTreeThan snapshot: Snapshot, publications: inout UInt64) -> Snapshot? {
        let published = snapshots.publications
        guard published != publications else { return nil }
        publications = published
        let current = snapshots.current
        guard current.version == snapshot.version, current.treeVersion > snapshot.state.treeVersion else { return nil }
        let newer = self.snapshot()
        return newer.version == snapshot.version ? newer : nil
    }

    /// Calls `observer` with every batch published from now on, in version order, from
    /// the committing thread while it holds the commit lock: the observer must be quick
    /// and must not call back into the engine. Replaces any earlier observer: the `Store`
    /// holds this hook (package access), and applications observe through the store.
    package func observeCommits(_ observer: CommitObserver?) {
        let box = observer.map(CommitObserverBox.init)
        publishObserver.withLock { $0 = box }
    }

    /// The oldest version whose batch the write-ahead log may still hold; checkpoints
    /// release older ones.
    public var oldestLoggedVersion: UInt64 {
        switch logAccess {
        case let .writer(log, _): log.oldestLSN.rawValue
        case let .reader(extent): extent.withLock { $0.oldestLSN.rawValue }
        }
    }

    /// Starts keeping history when the store's options keep it from the first change feed
    /// (`HistoryRetention.Start.onFirstChangeFeed`); nothing for a read-only store.
    package func keepHistory() throws {
        guard case let .writer(log, _) = logAccess else { return }
        do { try log.startKeepingHistory() } catch let error as WALError { throw EngineError.log(error) }
    }

    /// The oldest version whose batch the log or its history still holds
    /// (`WALOptions.history`).
    public var oldestHistoryVersion: UInt64 {
        get throws {
            try historyLock.withLock { _ in try oldestKeptVersion() }
        }
    }

    private func oldestKeptVersion() throws -> UInt64 {
        let kept = try WriteAheadLog.oldestHistoryLSN(directory: joinPath(path, Self.logDirectoryName), fileSystem: fileSystem)
        return min(kept?.rawValue ?? .max, oldestLoggedVersion)
    }

    /// Passes the committed batches with versions in `versions` to `visit` in order, read
    /// back from the log's history (from the segment that holds the first of them on) and
    /// then the log. Throws `EngineError.historyUnavailable` when neither holds the first of
    /// them any more, or the log's errors. Holds off checkpoints' release of log segments
    /// meanwhile.
    public func history(_ versions: ClosedRange<UInt64>, visit: (UInt64, WALBatch) throws -> Void) throws {
        let logDirectory = joinPath(path, Self.logDirectoryName)
        try historyLock.withLock { _ in
            let oldestLogged = oldestLoggedVersion
            if versions.lowerBound < oldestLogged {
                let oldest = try oldestKeptVersion()
                guard versions.lowerBound >= oldest else {
                    throw EngineError.historyUnavailable(requested: versions.lowerBound, oldest: oldest)
                }
                let next = try WriteAheadLog.readHistory(directory: logDirectory, fileSystem: fileSystem,
                                                         from: LSN(versions.lowerBound)) { record in
                    let version = record.lsn.rawValue
                    // A segment a crash left in both places is read from the log below.
                    if version < oldestLogged && versions.contains(version) { try visit(version, record.batch) }
                }
                // History that ends before the log begins (a segment lost to a crash between
                // the two) leaves a gap: never read past it.
                guard let next, next.rawValue >= oldestLogged else {
                    throw EngineError.historyUnavailable(requested: versions.lowerBound, oldest: oldestLogged)
                }
            }
            _ = try WriteAheadLog.read(directory: logDirectory, fileSystem: fileSystem) { record in
                if versions.contains(record.lsn.rawValue) { try visit(record.lsn.rawValue, record.batch) }
            }
        }
    }

    /// What the write-ahead log did since the store was opened (group commits, fdatasyncs,
    /// bytes, compression); all zero for a read-only store.
    public var logStatistics: WALStatistics {
        if case let .writer(log, _) = logAccess { log.statistics } else { WALStatistics() }
    }

    /// Ends a snapshot of `view` that the registry's `pin()` counted in `stripe`.
    func unpin(_ view: Unmanaged<EngineState>, stripe: Int) {
        // Read before the unpin, which may let the view go.
        let generation = readerSlot == nil ? 0 : view._withUnsafeGuaranteedRef { $0.treeGeneration }
        snapshots.unpin(view, stripe: stripe)
        // A reader beside a writer gives the pages of trees it no longer reads back.
        if readerSlot != nil, generation < snapshots.current.treeGeneration { repinReaderSlot() }
    }

    /// Sets a read-only store's pin in the reader table to the oldest tree its snapshots
    /// or its current view read. The current view is read before the snapshots are
    /// counted: one taken meanwhile reads it or a newer one.
    func repinReaderSlot() {
        guard let readerSlot else { return }
        readerPinLock.withLock { _ in
            let newest = snapshots.current.treeGeneration
            readerSlot.pin(generation: min(snapshots.oldestPins().generation ?? .max, newest))
        }
    }

    /// The value a leaf entry stands for (reading its overflow pages if it has them).
    func value(of entry: LeafEntry) throws -> [UInt8]? {
        switch entry.payload {
        case let .inline(value): value
        case let .overflow(value): try pageFile.overflowValue(value)
        case .tombstone: nil
        }
    }

    /// Checkpoints what the memtable holds (unless `checkpoint` is false: the next open
    /// then replays the log) and shrinks the log back to one small segment, closes the log
    /// and the data file, and releases the lock. After any checkpoint since the open (its
    /// own or a background one), it gives free pages back (`vacuum()`). A store with
    /// nothing committed and nothing checkpointed since the open writes nothing, nor does a
    /// read-only one. Later calls throw `EngineError.closed`.
    ///
    /// A background checkpoint running when a close that checkpoints comes may stop after
    /// a run of pages; the close's checkpoint then folds both memtables in one pass over
    /// the tree: finished, the running one would rewrite leaves that the close's
    /// checkpoint then rewrites again (with random keys, nearly the whole tree each time).
    /// It stops when the keys of its memtable and of the one that took commits since span
    /// ranges that overlap, and stopping writes fewer pages than letting it end
    /// (`StopCosts`): keys in ranges apart (a fill in key order) land in different leaves,
    /// a few keys in few, and a fold that would land past the tree's size leaves the
    /// close's vacuum the whole tree to move; in each case the running checkpoint ends.
    public func close(checkpoint: Bool = true) throws {
        let (alreadyClosed, failed) = commitLock.withLock { commits in
            defer { commits.closed = true }
            return (commits.closed, commits.failure != nil)
        }
        guard !alreadyClosed else { return }
        if checkpoint && !failed, case .writer = logAccess, runningCheckpointOverlapsActive() {
            checkpointStopRequested.store(true, ordering: .relaxed)
        }
        defer {
            pageFile.markClosed()
            if readerSlot != nil { pageFile.discardMappings() }
            try? pageFile.file.close()
            for lock in locks { lock.unlock() }
            readerSlot?.release()
        }
        guard case let .writer(log, waiter) = logAccess else { return }
        defer { readerTable?.detachWriter() }
        // A background checkpoint ends before the files it writes close (one that had not
        // begun sees `closed` and does nothing).
        checkpointEnded.lock()
        while checkpointRunning.load(ordering: .acquiring) { checkpointEnded.wait() }
        checkpointEnded.unlock()
        waiter.stop()
        defer { try? log.close() }
        // After the checkpoint, which waits for the batches it folds to be linked.
        defer { applier.stop() }
        if checkpoint && commitLock.withLock({ $0.failure == nil }) {
            let checkpointed = { self.checkpointLock.withLock { $0.meta.checkpointVersion } }
            if version > checkpointed() { try checkpointNow() }
            // After a checkpoint of this close or one that ran in the background (one a
            // commit started, or of a quiet or idle memtable), the pages it freed may be
            // given back.
            if checkpointLock.withLock({ $0.vacuumDue }) { try vacuum() }
            do {
                try historyLock.withLock { _ in _ = try log.shrink(through: LSN(releasableLSN(through: checkpointed()))) }
            } catch let error as WALError {
                throw EngineError.log(error)
            }
        }
    }
}

extension StorageEngine {
    /// Whether a running checkpoint froze a memtable whose keys span a range that the
    /// active memtable's keys overlap. Read as a reader reads them: a node the applier is
    /// still linking may be missed, and nothing but the close's cost rests on the answer.
    func runningCheckpointOverlapsActive() -> Bool {
        let state = snapshots.current
        guard let frozen = state.frozen else { return false }
        let active = state.active
        frozen.linkDeferred()
        active.linkDeferred()
        guard let frozenFirst = frozen.head.next(0), let frozenLast = frozen.lastNode(below: nil),
              let activeFirst = active.head.next(0), let activeLast = active.lastNode(below: nil) else { return false }
        return activeFirst.compare(with: frozenLast.key) <= 0 && activeLast.compare(with: frozenFirst.key) >= 0
    }
}

/// How a store reaches its log.
enum LogAccess: Sendable {
    /// A writer appends to the log; async commits wait for its fdatasyncs on the waiter.
    case writer(WriteAheadLog, DurabilityWaiter)
    /// A read-only store read the log at open and reads it again at each `refresh()`
    /// (as far as it read it last).
    case reader(Locked<LogExtent>)
}

/// How a store is opened.
public enum AccessMode: Sendable, Equatable {
    /// Commits and checkpoints: one opener at a time, in any process.
    case readWrite
    /// Reads only, beside one writer in this or another process: never writes a byte of
    /// the store but its reader table (`readers`), where it pins the version it reads
    /// (FORMAT.md, "Reader table"). Any number may be open at once (up to the table's
    /// slots). The log is replayed in memory; each new snapshot moves to the newest version
    /// the writer made durable (`StorageEngine.refresh()`). Where the table cannot be
    /// written (read-only media), it is opened without one: then alone with other such
    /// readers, and refused while a process writes the store.
    case readOnly
}

/// Receives published batches with their versions (see `StorageEngine.observeCommits`).
package typealias CommitObserver = @Sendable (PublishedBatches) -> Void

/// Batches published together, each with its version, as a commit observer receives
/// them: a view of the engine's batches in flight (one kept past the call holds their
/// storage, which the engine then copies instead of reusing). An observer with no one to
/// tell reads none of it; made into an array of tuples for every commit, they cost a
/// one-key commit about 400 instructions (callgrind, strata-bench fillsync).
package struct PublishedBatches: RandomAccessCollection, Sendable {
    /// The version of the first batch; each after it is one newer.
    package let firstVersion: UInt64
    let batches: ArraySlice<WALBatch>

    package var startIndex: Int { 0 }
    package var endIndex: Int { batches.count }

    package subscript(position: Int) -> (version: UInt64, batch: WALBatch) {
        (firstVersion + UInt64(position), batches[batches.startIndex + position])
    }
}

/// A commit observer held by reference, so reading it out of a lock copies a pointer
/// instead of re-wrapping the closure.
final class CommitObserverBox: Sendable {
    let observe: CommitObserver

    init(_ observe: @escaping CommitObserver) { self.observe = observe }
}

/// Commits between conflict check and publication.
struct CommitState {
    var publishedVersion: UInt64
    /// Batches whose frame is in the log but not yet published, in the order of their
    /// versions, the first `publishedVersion + 1` (a commit's version is the LSN the log
    /// gives it, and the LSNs of new commits follow one another). An array, not a
    /// dictionary by version: hashing a commit's version in and out cost about 700
    /// instructions (callgrind, one-key commits).
    var inFlight: [WALBatch] = []
    /// The newest version given to a commit (at least `publishedVersion`).
    var lastEnqueuedVersion: UInt64
    var failure: String?
    var closed = false
}

// A short description and mirror: `dump(engine)` names the store instead of walking its
// page cache, memtables and log.
extension StorageEngine: CustomStringConvertible, CustomReflectable {
    public var description: String { "StorageEngine(\(path), version \(version))" }

    public var customMirror: Mirror {
        Mirror(self, children: ["path": path, "version": version], displayStyle: .class)
    }
}
