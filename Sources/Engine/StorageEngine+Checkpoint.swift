// Checkpoints: freeze the active memtable, fold it into the B+tree copy-on-write, sync the
// data file, write the other meta page, sync again, publish the new tree, then release
// the log segments the checkpoint covers (StorageEngine.E2). Commits and readers continue meanwhile:
// commits go to a new active memtable, readers keep the view they hold.
import CStrataPlatform
import Dispatch
import Foundation
import StrataWAL

extension StorageEngine {
    /// Runs a checkpoint now (one at a time; a call while one runs waits for it).
    /// Throws `EngineError` (`.readOnly` for a read-only store); an I/O failure stops the
    /// store (StorageEngine.E3).
    public func checkpoint() throws {
        if commitLock.withLock({ $0.closed }) { throw EngineError.closed }
        try checkpointNow()
    }

    /// `underLoad`: started by the writes themselves (`checkpointIfDue`), so the next
    /// memtable's index is backed with memory at once (see `Memtable.init`); a checkpoint
    /// asked for or run by a close leaves it sparse, costing no memory until keys come.
    ///
    /// `only`: the memtable a quiet streak or an idle tick asked to fold
    /// (`checkpointIfQuiet`, `checkpointIfIdle`); nothing is done when another checkpoint
    /// froze it first.
    ///
    /// `pacer`: a checkpoint on a thread of its own (`startCheckpoint`) paced by it; none on
    /// the caller's thread (`checkpoint()`, a close), whose priority is left alone.
    ///
    /// `stoppable`: a background checkpoint, which a close may stop (`close()`): it then
    /// returns having published no tree (the batches it waited for are published, and the
    /// log rotated), its memtable left frozen for the close's checkpoint to fold.
    func checkpointNow(underLoad: Bool = false, only memtable: Memtable? = nil, pacer: CheckpointPacer? = nil,
                       stoppable: Bool = false) throws {
        let log = try writableLog().log
        try checkpointLock.withLock { durable in
            if let failure = commitLock.withLock({ $0.failure }) { throw EngineError.storeFailed(reason: failure) }
            if let memtable, snapshots.current.active !== memtable { return }
            let start = ContinuousClock.now
            do {
                try runCheckpoint(&durable, log: log, underLoad: underLoad, pacer: pacer, stoppable: stoppable)
            } catch is CheckpointStopped {
                stoppedCheckpoints.add(1, ordering: .relaxed)
                options.logger.debug("checkpoint stopped by the close, which folds its memtable with the next",
                                     metadata: ["path": "\(path)", "duration": "\(ContinuousClock.now - start)"])
                return
            } catch {
                commitLock.withLock { $0.failure = "checkpoint failed: \(error)" }
                options.logger.error("checkpoint failed; the store accepts no more writes until reopened",
                                   metadata: ["path": "\(path)", "error": "\(error)"])
                throw error
            }
            if options.returnsFreedMemory {
                _ = cplatform_release_free_memory()
                freedMemoryReturns.add(1, ordering: .relaxed)
            }
            options.logger.debug("checkpoint done", metadata: [
                "path": "\(path)", "version": "\(durable.meta.checkpointVersion)",
                "pages": "\(durable.meta.pageCount)", "duration": "\(ContinuousClock.now - start)",
            ])
        }
    }

    /// Starts a checkpoint on a background thread when the memtable or the log passed its
    /// threshold, or the memtable's hash index is nearly full (MemtableIndex: past it, the
    /// memtable's keys would be found by skip-list searches), and none runs; the committing
    /// thread does not wait for it, unless one runs already and the memtable passed its
    /// bound (`EngineOptions.maxMemtableBytes`): then it waits for that one to end and
    /// starts the next (a write stall), or, if that one had not frozen the memtable yet,
    /// for it to do so.
    func checkpointIfDue() {
        guard case let .writer(log, _) = logAccess else { return }
        while true {
            let active = snapshots.current.active
            let memtableBytes = active.byteCount
            let logBytes = log.statistics.bytesWritten - logBytesAtCheckpoint.load(ordering: .relaxed)
            guard memtableBytes >= options.checkpointMemtableBytes || logBytes >= options.checkpointLogBytes
                    || active.index.isNearlyFull else { return }
            if startCheckpoint(underLoad: true) { return }
            guard let bound = options.maxMemtableBytes, memtableBytes >= bound else { return }
            // A checkpoint that started but has not frozen yet takes this memtable: then
            // the next one, empty, takes commits as soon as it is frozen.
            checkpointEnded.lock()
            while checkpointRunning.load(ordering: .acquiring) && snapshots.current.active === active { checkpointEnded.wait() }
            checkpointEnded.unlock()
        }
    }

    /// Starts a checkpoint on a background thread unless one runs; returns whether it did.
    /// (`close()` waits for it to end.)
    private func startCheckpoint(underLoad: Bool, only memtable: Memtable? = nil) -> Bool {
        guard checkpointRunning.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return false
        }
        Thread.detachNewThread { [self] in
            // Its writes yield to readers from their start when readers or an idle tick
            // started it, once the commits stop when the commits did (`CheckpointPacer`).
            // Not where commits may wait for it (a memtable bound): a commit stalled behind
            // a checkpoint that yielded would wait for as long as readers keep the CPUs.
            let pacer = options.maxMemtableBytes != nil ? nil
                : CheckpointPacer(commits: { [self] in lastEnqueuedVersion.load(ordering: .relaxed) }, yielding: memtable != nil) { [self] in
                    if CheckpointPacer.lowerCurrentThread() { yieldedCheckpoints.add(1, ordering: .relaxed) }
                }
            // A failure is recorded by `checkpointNow()` and reported by the next commit (StorageEngine.E3).
            if !commitLock.withLock({ $0.closed }) {
                try? checkpointNow(underLoad: underLoad, only: memtable, pacer: pacer, stoppable: true)
            }
            checkpointEnded.lock()
            checkpointRunning.store(false, ordering: .releasing)
            checkpointEnded.broadcast()
            checkpointEnded.unlock()
        }
        return true
    }

    /// How many seeks in a row, with no commit between them, make a memtable quiet
    /// (`checkpointIfQuiet`).
    static let quietSeekStreak = 1_024
    /// The least a quiet memtable holds to be folded: this fraction of
    /// `checkpointMemtableBytes` (1/16).
    static let quietMemtableDivisor = 16

    /// Called by each seek (a walk from a key, forwards or backwards, bounded or not) that
    /// reads `state`: starts a checkpoint on a background thread when the memtable taking
    /// commits has taken none during the last `quietSeekStreak` seeks or more and holds at
    /// least 1/`quietMemtableDivisor` of `checkpointMemtableBytes`, and no checkpoint runs
    /// (seeks made while one runs count: the first seek after it ends starts the next).
    /// As LevelDB compacts a table that seeks keep paying for, a store that stopped writing
    /// folds its memtable into the tree, where a seek reads only the tree: a seek through
    /// a skip list of a few hundred thousand changes misses the cache at each of its
    /// twenty-odd steps, and a walk merges the memtable's keys with the tree's. The
    /// checkpoint writes nothing the next one would not have; it only comes sooner, and
    /// folds that memtable or nothing (when another checkpoint froze it first), so each
    /// folds at least 1/16 of the budget. A store that commits within every
    /// `quietSeekStreak` seeks (fewer seeks than that between two commits) never starts
    /// one this way. A memtable starts at most one.
    func checkpointIfQuiet(_ state: EngineState) {
        let memtable = state.active
        guard !memtable.isEmpty, case .writer = logAccess,
              memtable.byteCount >= options.checkpointMemtableBytes / Self.quietMemtableDivisor,
              memtable.noteQuietSeek(streak: Self.quietSeekStreak),
              !checkpointRunning.load(ordering: .relaxed),
              // Once per memtable: an older snapshot's, which a checkpoint froze since, is
              // then passed over without a look at the current state (a lock).
              memtable.claimQuietStreak(), memtable === snapshots.current.active else { return }
        if startCheckpoint(underLoad: false, only: memtable) {
            options.logger.debug("checkpoint of a quiet memtable", metadata: ["path": "\(path)", "bytes": "\(memtable.byteCount)"])
        }
    }

    /// Called after each commit: schedules an idle tick `EngineOptions.idleCheckpointDelay`
    /// from now unless one is scheduled. No clock is read and nothing is locked per
    /// commit: a relaxed load finds the tick armed.
    func armIdleCheckpoint() {
        guard let delay = options.idleCheckpointDelay, !idleTimerArmed.load(ordering: .relaxed),
              idleTimerArmed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        scheduleIdleTick(after: delay, seen: snapshots.current.version)
    }

    private func scheduleIdleTick(after delay: Duration, seen version: UInt64) {
        // At most a year: a longer wait is no different, and the sum cannot overflow.
        let (seconds, attoseconds) = min(delay, .seconds(365 * 86_400)).components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [weak self] in
            self?.idleTick(after: delay, seen: version)
        }
    }

    /// An idle tick, `delay` after the one that saw the store at `version` (or after the
    /// commit that armed it): when no commit came since, the store was idle for at least
    /// `delay` and `checkpointIfIdle` runs; otherwise the next tick is scheduled. While a
    /// checkpoint runs the ticks go on, so that the memtable taking commits is folded once
    /// it ends. The ticks stop once the store is idle (the next commit arms them again)
    /// or closed.
    func idleTick(after delay: Duration, seen version: UInt64) {
        guard !commitLock.withLock({ $0.closed }) else {
            idleTimerArmed.store(false, ordering: .releasing)
            return
        }
        let state = snapshots.current
        guard state.version == version, !checkpointRunning.load(ordering: .acquiring) else {
            scheduleIdleTick(after: delay, seen: state.version)
            return
        }
        idleTimerArmed.store(false, ordering: .releasing)
        checkpointIfIdle(state)
        // A commit published between the look at the version and the disarm found the tick
        // still armed: arm it for that commit.
        if snapshots.current.version != version { armIdleCheckpoint() }
    }

    /// Starts a checkpoint on a background thread of the memtable taking commits in
    /// `state`, which took none for `EngineOptions.idleCheckpointDelay`, when it holds at
    /// least 1/`quietMemtableDivisor` of `checkpointMemtableBytes` and no checkpoint runs.
    /// As with a quiet memtable (`checkpointIfQuiet`), the checkpoint writes nothing the
    /// next one would not have; it only comes sooner. A store that stopped writing then
    /// holds no memtable: its reads go to the tree alone, a crash replays nothing, and the
    /// memtable's memory is freed once no snapshot reads it.
    func checkpointIfIdle(_ state: EngineState) {
        let memtable = state.active
        guard !memtable.isEmpty, case .writer = logAccess,
              memtable.byteCount >= options.checkpointMemtableBytes / Self.quietMemtableDivisor,
              memtable === snapshots.current.active else { return }
        if startCheckpoint(underLoad: false, only: memtable) {
            options.logger.debug("checkpoint of an idle memtable", metadata: ["path": "\(path)", "bytes": "\(memtable.byteCount)"])
        }
    }

    /// What a close weighs before it stops a running checkpoint (`close()`): the pages
    /// written if it stops it and folds both memtables in one pass, against those written
    /// if it lets it end and checkpoints the memtable that took commits since. Each pass
    /// hands out free pages lowest first, then pages past the end of the file, and the
    /// close's vacuum moves the pages of the tree that lie past about the size the tree
    /// then needs (when enough of the file is free: `vacuum()`): where a pass lands
    /// counts as much as what it rewrites. Keys are taken as spread over the tree at
    /// random (a fill in key order never gets here: its memtables' keys do not overlap),
    /// and the tree as growing by the share the running pass shows so far (new keys split
    /// leaves: a fill writes about two pages for each it replaces, an overwrite one; the
    /// first runs of a pass, written before the leaves they replace are counted, show
    /// less). An empty tree is taken as the pages the running memtable's bytes fill: a
    /// fill's first checkpoint replaces nothing.
    struct StopCosts {
        /// Pages of the tree now (neither free nor holding the free list).
        var treePages: Int
        /// The data file's page count.
        var pageCount: Int
        /// The free pages a pass may write, in ascending order.
        var free: [UInt64]
        /// Keys of the running checkpoint's memtable, and of the one taking commits.
        var frozenKeys: Int
        var activeKeys: Int

        /// Pages a pass over `keys` keys rewrites in a tree of `pages` pages: the leaves
        /// they land in (each missed by every key with probability e^(-keys/leaves)),
        /// counting the tree's pages as leaves.
        static func rewritten(_ keys: Int, of pages: Double) -> Double {
            pages * (1 - exp(-Double(keys) / max(pages, 1)))
        }

        /// Whether stopping the running checkpoint, having written `pagesWritten` pages in
        /// place of `pagesReplaced` of the old tree, writes at least a tenth fewer pages
        /// than letting it end.
        func stopPays(pagesWritten: Int, pagesReplaced: Int) -> Bool {
            let old = Double(max(treePages, 1))
            // The tree the passes leave, and the size the vacuum keeps for it (meta pages
            // and a 64th more).
            let growth = pagesReplaced > 0 ? min(4, max(1, Double(pagesWritten) / Double(pagesReplaced))) : 1
            let grown = old * growth
            let size = 2 + grown + max(8, grown / 64)
            // Pages a pass can write within that size: free ones, and those past the end
            // of the file up to it.
            var (low, high) = (0, free.count)  // free pages below `size`
            while low < high {
                let middle = (low + high) / 2
                if Double(free[middle]) < size { low = middle + 1 } else { high = middle }
            }
            let freeWithin = Double(low)
            let room = freeWithin + max(0, size - Double(pageCount))
            let (running, closing, folding) = (Self.rewritten(frozenKeys, of: grown), Self.rewritten(activeKeys, of: grown),
                                               Self.rewritten(frozenKeys + activeKeys, of: grown))
            // Stopped: the fold lands within the size as far as the room goes, and the
            // vacuum moves the rest.
            let stopping = folding + max(0, folding - room)
            // Let end: the running pass writes its rest, in that room first. Once durable,
            // the old tree's pages it replaced are free, as many of them within the size
            // as the old tree had there; the close's pass lands in them, and the vacuum
            // moves what did not fit, and the running pass's pages past the size that the
            // close's pass did not replace.
            let remaining = max(0, running - Double(pagesWritten))
            let oldWithin = max(0, min(old, min(size, Double(pageCount)) - 2 - freeWithin)) / old
            let freeAfter = max(0, room - running) + running / growth * oldWithin
            let movedAfter = max(0, closing - freeAfter) + max(0, running - room) * (1 - closing / grown)
            let ending = remaining + closing + movedAfter
            // A tenth to spare: the estimates are rough, and where the two come close a
            // stop throws away what the running pass wrote. Right after a load, at the
            // start of the running pass, both choices write about twice the tree: the
            // margin, not the landing, lets that pass go on.
            return stopping < 0.9 * ending
        }
    }

    private func runCheckpoint(_ durable: inout CheckpointState, log: WriteAheadLog, underLoad: Bool, pacer: CheckpointPacer?,
                               stoppable: Bool) throws {
        // Freeze: new commits go to a fresh memtable from here on, made (and, under a
        // stream of writes, its index backed with memory) before the locks are taken.
        // Unless a stopped checkpoint left its memtable frozen: only a close stops one, and
        // no commit is enqueued after a close (those enqueued before are linked and
        // published below), so the view keeps its memtables and this checkpoint folds
        // both, the active one's changes over the frozen one's.
        let next = Memtable(budgetBytes: options.checkpointMemtableBytes, populated: underLoad)
        let (frozenState, frozenThrough, foldsBoth) = commitLock.withLock { commits in
            if snapshots.current.frozen != nil {
                precondition(commits.closed, "a memtable was left frozen while the store takes commits")
                return (snapshots.current, commits.lastEnqueuedVersion, true)
            }
            return (snapshots.publish { $0.with(frozen: .some($0.active), active: next) }, commits.lastEnqueuedVersion, false)
        }
        if !foldsBoth { frozenState.frozen?.releaseSpareBlock() }
        // Commits stalled on the memtable just frozen go on into the next.
        checkpointEnded.lock()
        checkpointEnded.broadcast()
        checkpointEnded.unlock()
        // Counted after the freeze: a snapshot taken since reads the current tree, no older
        // than any tree whose freed pages wait below.
        let oldestInProcess = snapshots.oldestPins().generation
        // The frozen memtable also holds (or will, once linked) the batches in flight at the
        // freeze: fold it only once they are durable and published, so that the tree never
        // holds a change a new snapshot could not see.
        let checkpointVersion = max(frozenThrough, frozenState.version)
        if checkpointVersion > frozenState.version {
            do { try log.waitUntilDone(LSN(checkpointVersion)) } catch let error as WALError { throw EngineError.log(error) }
            publish(through: checkpointVersion)
        }
        logBytesAtCheckpoint.store(log.statistics.bytesWritten, ordering: .relaxed)
        // Frames after the frozen version go to a new segment, so that this checkpoint
        // can release the one holding the frozen batches.
        log.rotate(after: LSN(checkpointVersion))
        // Newest first.
        let folded = foldsBoth ? [frozenState.active, frozenState.frozen!] : [frozenState.frozen ?? Memtable()]
        let generation = durable.meta.generation + 1
        // Pages freed by older checkpoints become reusable once no snapshot reads their
        // trees, in this process or another (the reader table's pins). Taken from
        // `durable` only once the checkpoint is written: one that stops leaves it whole.
        let oldestReader = readerPins().generation
        let oldestPin = [oldestInProcess, oldestReader].compactMap { $0 }.min()
        var reusable = durable.reusable
        var stillPending = durable.pending
        stillPending.removeAll { pending in
            guard oldestPin.map({ pending.generation <= $0 }) ?? true else { return false }
            reusable += pending.pages
            return true
        }
        // A close asks for a stop (`close()`); it stops when that writes fewer pages
        // (`StopCosts`). A memtable of a few keys, closing over a checkpoint nearly done,
        // lets that checkpoint end; so does one whose fold would land past the tree's
        // size for the vacuum to move, when the old tree lies within it. (No commit is
        // enqueued after a close: the count read is the last.)
        let stops: ((Int, Int) -> Bool)?
        if stoppable {
            let treePages = Int(durable.meta.pageCount) - 2 - reusable.count - stillPending.reduce(0) { $0 + $1.pages.count }
                - durable.freeListPages.count
            let (frozenKeys, pageCount) = (folded.reduce(0) { $0 + $1.count }, Int(durable.meta.pageCount))
            let frozenPages = folded.reduce(0) { $0 + $1.byteCount } / pageFile.pageBytes
            // Sorted once a close asks for a stop (most checkpoints never see one).
            var free: [UInt64]?
            stops = { [self, reusable] pagesWritten, pagesReplaced in
                guard checkpointStopRequested.load(ordering: .relaxed) else { return false }
                let sorted = free ?? reusable.map(\.rawValue).sorted()
                free = sorted
                let costs = StopCosts(treePages: treePages > 0 ? treePages : max(1, frozenPages), pageCount: pageCount,
                                      free: sorted, frozenKeys: frozenKeys,
                                      activeKeys: snapshots.current.active.count)
                return costs.stopPays(pagesWritten: pagesWritten, pagesReplaced: pagesReplaced)
            }
        } else {
            stops = nil
        }
        var writer = TreeWriter(file: pageFile, generation: generation,
                                purgeTombstonesThrough: checkpointVersion == 0 ? 0 : oldestReadVersion(),
                                allocator: PageAllocator(reusable: reusable, pageCount: durable.meta.pageCount),
                                compressesLeaves: options.leafCompression == .lz4,
                                writesChains: options.writesOverflowChains, pacer: pacer, stops: stops)
        // The newest change of each key, read in place (the frozen memtables live until
        // this function returns).
        let changes = Memtable.newestChanges(of: folded, at: checkpointVersion)
        // Paced, the writes run on a thread of their own, the one the pacer may lower: the
        // rest (the freeze, the syncs, the publication, the log's release) takes locks that
        // commits and readers wait for, and keeps this thread's priority (CheckpointPacer.C1).
        let tree: BTree
        do {
            tree = try withExtendedLifetime(folded) {
                guard let pacer else { return try writer.apply(changes, to: frozenState.tree) }
                return try CheckpointPacer.onThreadOfItsOwn(&writer) { writer in
                    pacer.begin()
                    return try writer.apply(changes, to: frozenState.tree)
                }
            }
        } catch let stopped as CheckpointStopped {
            // No durable meta page or pinned tree reaches what it wrote: its pages stay
            // free, and leave the process's resident set.
            pageFile.releaseMapped(writer.allocator.allocated)
            throw stopped
        }
        durable.pending = stillPending

        // The free list: every page free after this checkpoint, stored in pages that are
        // free now and unpinned (never in a page an older tree or snapshot may read).
        // Each list of page IDs is built once, at its size: with tens of thousands of free
        // pages, the copies made on the way were a checkpoint's largest allocations.
        var unused = writer.allocator.takeReusable()
        var freedNow = writer.freed
        writer.freed = []
        freedNow.append(contentsOf: durable.freeListPages)
        let stillPendingCount = durable.pending.reduce(0) { $0 + $1.pages.count }
        let perPage = PageCodec.freeListCapacity(pageBytes: pageFile.pageBytes)
        let listPageCount = (unused.count + stillPendingCount + freedNow.count + perPage - 1) / perPage
        var listPages: [PageID] = []
        var pageCount = writer.allocator.pageCount
        for _ in 0..<listPageCount {
            if let page = unused.popLast() {
                listPages.append(page)
            } else {
                listPages.append(PageID(pageCount))
                pageCount += 1
            }
        }
        do {
            var listed: [PageID] = []
            listed.reserveCapacity(unused.count + stillPendingCount + freedNow.count)
            listed.append(contentsOf: unused)
            for pending in durable.pending { listed.append(contentsOf: pending.pages) }
            listed.append(contentsOf: freedNow)
            try pageFile.writeFreeList(listed, in: listPages, generation: generation)
        }
        try pageFile.syncData()

        let meta = MetaPage(pageBytes: pageFile.pageBytes, generation: generation, root: tree.root,
                            freeListHead: listPages.first ?? .none, checkpointVersion: checkpointVersion,
                            pageCount: pageCount,
                            keyCount: UInt64(max(0, Int(durable.meta.keyCount) + writer.keyCountDelta)),
                            height: UInt64(tree.height))
        try pageFile.writeMeta(meta)
        try pageFile.syncData()

        durable.meta = meta
        durable.reusable = unused
        durable.freeListPages = listPages
        durable.vacuumDue = true
        if !freedNow.isEmpty { durable.pending.append((generation, freedNow)) }
        publishingThreadNice.store(CheckpointPacer.currentThreadNice, ordering: .relaxed)
        snapshots.publish { state in
            let folded = state.with(tree: tree, generation: generation, treeVersion: checkpointVersion)
            return foldsBoth ? folded.with(active: next) : folded
        }
        snapshots.releaseIdleViews()
        pageFile.releaseMapped(freedNow)
        readerTable?.publish(generation: generation)
        // What older checkpoints freed and snapshots of older trees still hold (this
        // checkpoint's own freed pages wait for the next one whatever readers do).
        readerTable?.publishPinned(pages: UInt64(stillPendingCount))
        // Every segment the checkpoint covers goes, the active one too when no commit came
        // after the frozen version (a store killed now replays nothing it need not), but
        // none that a reader still reads: the table is read after the meta page is written
        // (ReaderTable.T1).
        let releasable = LSN(releasableLSN(through: checkpointVersion))
        do {
            try historyLock.withLock { _ in
                try log.releaseSegments(through: releasable)
                try log.shrink(through: releasable, keepingSpares: true)
            }
        } catch let error as WALError {
            throw EngineError.log(error)
        }
    }

    /// The oldest version a live snapshot reads at (or the latest version when none is
    /// live): tombstones at or below it can no longer cause a conflict.
    private func oldestReadVersion() -> UInt64 {
        // The current version first: a snapshot taken after it is read reads it or a newer one.
        let latest = snapshots.current.version
        return min(snapshots.oldestPins().version ?? latest, latest)
    }
}
