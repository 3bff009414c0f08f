// Giving free pages back at a close: after a checkpoint, the pages of the trees it replaced
// are free but scattered through the file, which therefore cannot simply be cut short. When
// they are a fifth of the file or more, a close moves the tree's pages that lie past the
// size the live pages need into free pages before it (copy-on-write, like a checkpoint: the
// old pages stay intact until the new meta page is durable), writes the meta page with the
// smaller page count, and truncates the file. With less free, only a run of free pages at
// the end of the file is cut off, the same way without moving a page. A store emptied of
// every key, whose pages but the meta pages are all free, is cut to its two meta pages.
//
// Crash safety is a checkpoint's (StorageEngine.E2): pages are written only where the durable meta page
// has free space; the new meta page is written after they are synced; the truncation comes
// after the meta page is synced (a crash before it leaves a longer file whose tail no meta
// page reaches).
import StrataFileIO

extension StorageEngine {
    /// The fraction of the data file that must be free before a close moves pages.
    static let vacuumFreeFraction = (numerator: 1, denominator: 5)

    /// Moves pages and truncates the data file when enough of it is free, or cuts off the
    /// free pages at its end (see above).
    /// Called by `close()` after its checkpoint, or after a background one. Does nothing
    /// while a snapshot still pins an older tree: its pages are free in the meta page but
    /// that snapshot may read them, so none may be rewritten or cut off (a snapshot of the
    /// current tree reads only pages the copy leaves intact until the cut, which marks the
    /// file closed first).
    /// Returns the pages given back (0 when it did nothing).
    @discardableResult
    func vacuum() throws -> UInt64 {
        // No reader may pin a tree between the check for readers below and the cut.
        guard let readerTable else { return try vacuumAlone() }
        return try readerTable.excludingPinningReaders { try vacuumAlone() }
    }

    private func vacuumAlone() throws -> UInt64 {
        try checkpointLock.withLock { durable in
            durable.vacuumDue = false
            let meta = durable.meta
            let olderTreePinned = snapshots.oldestPins().generation.map { $0 < meta.generation } ?? false
            // A reader in another process (or a read-only store of this one) may read any
            // page of the file: nothing moves while one is open.
            guard !olderTreePinned, readerTable.map({ $0.liveReaders().isEmpty }) ?? true else { return 0 }
            let free = durable.reusable + durable.pending.flatMap(\.pages)
            let freeCount = UInt64(free.count + durable.freeListPages.count)
            if meta.root == .none && meta.pageCount > 2 && meta.pageCount == 2 + freeCount {
                return try cutToMetaPages(&durable)
            }
            guard meta.root != .none, meta.pageCount >= 2 + freeCount else { return 0 }
            let worthMoving = freeCount * UInt64(Self.vacuumFreeFraction.denominator)
                >= meta.pageCount * UInt64(Self.vacuumFreeFraction.numerator)

            // The tree's pages, from its branches (leaves are not read). Whatever else is
            // neither free nor the tree is an overflow page.
            var treePages: [PageID] = [meta.root]
            var branches = 0
            var level = [meta.root]
            for _ in 1..<max(1, Int(meta.height)) {
                var next: [PageID] = []
                for id in level {
                    guard case let .branch(children) = try pageFile.node(id) else {
                        throw corrupt(pageFile, id, "a leaf above the bottom level")
                    }
                    branches += 1
                    next += children.map(\.child)
                }
                treePages += next
                level = next
            }
            let live = meta.pageCount - 2 - freeCount
            let overflowPages = live - min(live, UInt64(treePages.count))
            let cutoff: UInt64
            if worthMoving {
                // Room for every live page, a fresh copy of each branch above a moved page,
                // and the free list.
                cutoff = 2 + live + UInt64(branches) + max(8, live / 64)
                guard cutoff + meta.pageCount / 10 < meta.pageCount else { return 0 }
            } else {
                // Too little free to move pages for: only a run of free pages at the end
                // of the file goes (no page moves).
                let allFree = Set(free + durable.freeListPages)
                var tail = meta.pageCount
                while tail > 2 && allFree.contains(PageID(tail - 1)) { tail -= 1 }
                guard tail < meta.pageCount else { return 0 }
                cutoff = tail
            }
            if overflowPages > 0 {
                // Overflow pages are not moved: give up when one may lie past the cutoff.
                var known = Set(treePages)
                known.formUnion(free)
                known.formUnion(durable.freeListPages)
                for raw in cutoff..<meta.pageCount where !known.contains(PageID(raw)) { return 0 }
            }

            let generation = meta.generation + 1
            var writer = TreeWriter(file: pageFile, generation: generation, purgeTombstonesThrough: 0,
                                    allocator: PageAllocator(reusable: free.filter { $0.rawValue < cutoff }, pageCount: cutoff),
                                    compressesLeaves: options.leafCompression == .lz4,
                                writesChains: options.writesOverflowChains)
            let root: PageID
            do {
                root = try writer.relocate(meta.root, level: 1, height: Int(meta.height), above: cutoff)
            } catch let stopped as RelocationStopped {
                // Nothing a meta page reaches was written: the file keeps its size.
                options.logger.debug("close kept the data file's size: a page of an older format does not fit one page of this one",
                                     metadata: ["page": "\(stopped.page.rawValue)"])
                return 0
            }
            // Every page written lies before the cutoff (the allocator never grew past it).
            guard writer.allocator.pageCount == cutoff else { return 0 }
            var unused = writer.allocator.takeReusable()
            var listed = (unused + durable.freeListPages + writer.freed).filter { $0.rawValue < cutoff }
            let perPage = PageCodec.freeListCapacity(pageBytes: pageFile.pageBytes)
            var listPages: [PageID] = []
            while listPages.count * perPage < listed.count {
                guard let page = unused.popLast() else { return 0 }
                listPages.append(page)
                listed.removeAll { $0 == page }
            }
            try pageFile.writeFreeList(listed, in: listPages, generation: generation)
            try pageFile.syncData()
            let vacuumed = MetaPage(pageBytes: pageFile.pageBytes, generation: generation, root: root,
                                    freeListHead: listPages.first ?? .none, checkpointVersion: meta.checkpointVersion,
                                    pageCount: cutoff, keyCount: meta.keyCount, height: meta.height)
            return try install(vacuumed, reusable: listed.filter { !listPages.contains($0) }, freeListPages: listPages,
                               into: &durable)
        }
    }

    /// Cuts the data file of a store whose tree is empty and whose every other page is
    /// free down to its two meta pages: a meta page that counts only them, with no free
    /// list (checkpoint lock held; no reader pins an older tree).
    private func cutToMetaPages(_ durable: inout CheckpointState) throws -> UInt64 {
        let meta = durable.meta
        let emptied = MetaPage(pageBytes: pageFile.pageBytes, generation: meta.generation + 1, root: .none, freeListHead: .none,
                               checkpointVersion: meta.checkpointVersion, pageCount: 2, keyCount: meta.keyCount,
                               height: meta.height)
        return try install(emptied, reusable: [], freeListPages: [], into: &durable)
    }

    /// Writes `shrunk`, the meta page of a smaller file (its pages and free list already
    /// synced), syncs it, takes it as the durable state with `reusable` free and no page
    /// pending, publishes its tree and truncates the file to its page count. Returns the
    /// pages given back.
    private func install(_ shrunk: MetaPage, reusable: [PageID], freeListPages: [PageID],
                         into durable: inout CheckpointState) throws -> UInt64 {
        let before = durable.meta.pageCount
        try pageFile.writeMeta(shrunk)
        try pageFile.syncData()
        durable.meta = shrunk
        durable.reusable = reusable
        durable.pending = []
        durable.freeListPages = freeListPages
        snapshots.publish {
            $0.with(tree: BTree(root: shrunk.root, height: Int(shrunk.height)), generation: shrunk.generation,
                    treeVersion: shrunk.checkpointVersion)
        }
        snapshots.releaseIdleViews()
        try pageFile.cut(toPages: Int(shrunk.pageCount))
        options.logger.debug("close gave free pages back", metadata: [
            "path": "\(path)", "pages_before": "\(before)", "pages_after": "\(shrunk.pageCount)",
        ])
        return before - shrunk.pageCount
    }
}
