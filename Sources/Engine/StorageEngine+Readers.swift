// Readers beside the writer: how a read-only store moves to newer versions, and what the
// writer's checkpoints, vacuum and log release leave to the readers that the reader table
// lists (ReaderTable.swift gives the protocol; FORMAT.md, "Reader table", the bytes).
import Foundation
import StrataFileIO
import StrataLocks
import StrataWAL

extension StorageEngine {
    /// Moves a read-only store to the newest version its writer made durable: new
    /// snapshots see it; those taken before keep the version they read, and their trees
    /// stay pinned until they end. A writer, or a read-only store opened without a reader
    /// table (which no writer can change meanwhile), has nothing to do. A store's version
    /// never goes backwards. Throws `EngineError` (`.closed`, a damaged page or log).
    public func refresh() throws {
        guard let table = readerTable, let slot = readerSlot, case let .reader(extent) = logAccess else { return }
        if commitLock.withLock({ $0.closed }) { throw EngineError.closed }
        try refreshLock.withLock { frozenThrough in
            let writerVersion = table.writerVersion
            let held = snapshots.current
            if try readOn(from: held, table: table, slot: slot, extent: extent) {
                followedWriterVersion.store(writerVersion, ordering: .relaxed)
                return
            }
            if try moveToNewerTree(frozenThrough: &frozenThrough, table: table, slot: slot, extent: extent) {
                followedWriterVersion.store(writerVersion, ordering: .relaxed)
                return
            }
            // The tree new snapshots take until the swap below stays pinned meanwhile.
            let olderPins = oldestTreeRead()
            let loaded = try Self.loadBesideWriter(path: path, fileSystem: fileSystem, options: options, pageFile: pageFile,
                                                   table: table, slot: slot, olderPins: olderPins)
            followedWriterVersion.store(writerVersion, ordering: .relaxed)
            let meta = loaded.meta
            // (`readOn` may have published what it read before it gave up.)
            let latest = snapshots.current
            guard loaded.version >= latest.version, meta.generation >= latest.treeGeneration else {
                // Never backwards (a writer's recovery may have cut frames never made durable).
                slot.pin(version: latest.version)
                return
            }
            let state = EngineState(version: loaded.version, tree: BTree(root: meta.root, height: Int(meta.height)),
                                    treeGeneration: meta.generation, treeVersion: meta.checkpointVersion, frozen: nil,
                                    active: loaded.active)
            checkpointLock.withLock { durable in
                durable = CheckpointState(meta: meta, reusable: loaded.free, freeListPages: loaded.freeListPages)
            }
            extent.withLock { $0 = loaded.extent }
            snapshots.publish { _ in state }
            // Stripes let go of the views they kept (and the memtables dropped here).
            snapshots.releaseIdleViews()
            repinReaderSlot()
        }
    }

    /// The oldest tree this store's snapshots or its current view read. The current view
    /// is read first: a snapshot taken meanwhile reads it or a newer one.
    private func oldestTreeRead() -> UInt64 {
        let newest = snapshots.current.treeGeneration
        return min(snapshots.oldestPins().generation ?? .max, newest)
    }

    /// When the tree read is still the newest, reads the log on from `current`'s version
    /// into its memtable and publishes what it read; returns false when a newer tree must
    /// be read instead.
    private func readOn(from current: EngineState, table: ReaderTable, slot: ReaderSlot,
                        extent: Locked<LogExtent>) throws -> Bool {
        guard try Self.readMeta(pageFile.file, path: pageFile.path).0.generation == current.treeGeneration else { return false }
        slot.pin(logFrom: current.version + 1)
        defer { slot.pin(logFrom: ReaderTable.none) }
        // A checkpoint that missed the pin wrote a newer meta page first (ReaderTable.T1).
        guard try Self.readMeta(pageFile.file, path: pageFile.path).0.generation == current.treeGeneration else { return false }
        let through = table.writerIsLive ? table.writerVersion : nil
        if let through, through <= current.version { return true }
        var last = current.version
        let read: (WALRecoveryReport, LogExtent)
        do {
            read = try readLog(after: current.version, through: through, into: current.active, extent: extent, last: &last)
        } catch is WALError {
            // The batches applied passed their checks and are at most the writer's durable
            // version: publish them (never apply them twice), then read the newest tree
            // and its log afresh.
            snapshots.publish { $0 === current && last > current.version ? current.with(version: last) : nil }
            return false
        }
        extent.withLock { $0 = read.1 }
        snapshots.publish { $0 === current ? current.with(version: last) : nil }
        slot.pin(version: last)
        return true
    }

    /// Reads the log's batches after `version` (through `through` when given) into
    /// `memtable`, from where the last read stopped when it stopped there; `last` follows
    /// the last batch applied.
    private func readLog(after version: UInt64, through: UInt64?, into memtable: Memtable, extent: Locked<LogExtent>,
                         last: inout UInt64) throws -> (WALRecoveryReport, LogExtent) {
        var applied = last
        defer { last = applied }
        return try WriteAheadLog.readForReplay(
            directory: joinPath(path, Self.logDirectoryName), fileSystem: fileSystem,
            options: Self.logOptions(options, checkpointVersion: version), through: through.map { LSN($0) },
            skippingSegmentsBefore: LSN(version + 1),
            resumingAt: extent.withLock { $0.end.flatMap { $0.lsn.rawValue == version + 1 ? $0 : nil } }
        ) { record in
            let lsn = record.lsn.rawValue
            guard lsn > applied else { return }
            memtable.apply(record.encoding, version: lsn)
            applied = lsn
        }
    }

    /// Moves to a newer tree keeping the changes already read: the active memtable becomes
    /// the frozen one, the frozen one is dropped, and the log is read on into a new active
    /// one. Reading the whole log after the new tree again, at every checkpoint of the
    /// writer, was most of a reader process's work under a steady stream of writes. Valid
    /// when the memtables kept hold every change from some version at or below the new
    /// tree's checkpoint on: the active memtable holds every change after the frozen one's
    /// (`frozenThrough`), so it is enough that the frozen one dropped holds none above the
    /// checkpoint, and that the log is read at least as far as the checkpoint (the tree
    /// holds nothing newer than the version published). A key's newest change is then in
    /// the memtables, or in the tree when they hold none of it. Returns false, having
    /// published nothing, when that does not hold or the log cannot be read on (then the
    /// tree and the log after it are read afresh).
    private func moveToNewerTree(frozenThrough: inout UInt64, table: ReaderTable, slot: ReaderSlot,
                                 extent: Locked<LogExtent>) throws -> Bool {
        let olderPins = oldestTreeRead()
        let current = snapshots.current
        let pinned = try table.pinning { () throws -> MetaPage? in
            let meta = try Self.readMeta(pageFile.file, path: pageFile.path).0
            slot.pin(generation: min(olderPins, meta.generation), logFrom: current.version + 1)
            // As `loadBesideWriter` (ReaderTable.T1).
            return try Self.readMeta(pageFile.file, path: pageFile.path).0.generation == meta.generation ? meta : nil
        }
        defer { slot.pin(logFrom: ReaderTable.none) }
        guard let meta = pinned, meta.generation > current.treeGeneration,
              current.frozen == nil || frozenThrough <= meta.checkpointVersion else { return false }
        try pageFile.followWriter()
        let (free, freeListPages) = try Self.readFreeList(meta, pageFile: pageFile)
        let active = Memtable(budgetBytes: 2 * options.checkpointMemtableBytes, defersLinking: true)
        let through = table.writerIsLive ? table.writerVersion : nil
        var last = current.version
        var read: (WALRecoveryReport, LogExtent)?
        if through.map({ $0 > current.version }) ?? true {
            do { read = try readLog(after: current.version, through: through, into: active, extent: extent, last: &last) } catch is WALError {
                return false
            }
        }
        guard last >= meta.checkpointVersion else { return false }
        let state = EngineState(version: last, tree: BTree(root: meta.root, height: Int(meta.height)),
                                treeGeneration: meta.generation, treeVersion: meta.checkpointVersion,
                                frozen: current.active, active: active)
        checkpointLock.withLock { durable in
            durable = CheckpointState(meta: meta, reusable: free, freeListPages: freeListPages)
        }
        if let read { extent.withLock { $0 = read.1 } }
        snapshots.publish { _ in state }
        // Stripes let go of the views they kept (and the frozen memtable dropped here).
        snapshots.releaseIdleViews()
        repinReaderSlot()
        slot.pin(version: last)
        frozenThrough = current.version
        return true
    }

    /// A read-only store beside a live writer moves to the writer's newest durable version
    /// when the writer published one since the last move (one atomic load otherwise). A
    /// failure leaves the version held; `refresh()` reports it.
    func refreshIfBehind() {
        guard let table = readerTable, readerSlot != nil else { return }
        guard table.writerVersion > followedWriterVersion.load(ordering: .relaxed) else { return }
        do { try refresh() } catch {
            options.logger.warning("a read-only store could not move to its writer's newest version",
                                   metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    // MARK: The writer's side

    /// The oldest tree generation and the first log LSN that live readers in any process
    /// still read (nil for none), clearing the slots of dead ones.
    func readerPins() -> (generation: UInt64?, logFrom: UInt64?) {
        guard let table = readerTable, readerSlot == nil else { return (nil, nil) }
        let live = table.liveReaders()
        let generation = live.map(\.generation).filter { $0 != ReaderTable.none }.min()
        let logFrom = live.map(\.logFrom).filter { $0 != ReaderTable.none }.min()
        return (generation, logFrom)
    }

    /// The highest LSN the log may release up to `lsn` given the readers' pins.
    func releasableLSN(through lsn: UInt64) -> UInt64 {
        guard let logFrom = readerPins().logFrom else { return lsn }
        return min(lsn, max(logFrom, 1) - 1)
    }

    /// The store's readers in other processes (and read-only stores of this one), for
    /// `status()`: each reader's process ID, the oldest tree generation and the version it
    /// reads.
    public var readers: [ReaderStatus] {
        guard let table = readerTable else { return [] }
        return table.liveReaders().filter { $0.slot != readerSlot?.slot }.map {
            ReaderStatus(process: Int32(truncatingIfNeeded: $0.process),
                         generation: $0.generation == ReaderTable.none ? nil : $0.generation, version: $0.version)
        }
    }
}

/// One read-only opener of a store, as the reader table lists it.
public struct ReaderStatus: Sendable, Equatable {
    /// The process that opened it.
    public var process: Int32
    /// The oldest tree (checkpoint generation) it may still read, whose pages the writer
    /// keeps; nil while it pins none.
    public var generation: UInt64?
    /// The version it reads.
    public var version: UInt64
}
