// The write side of the copy-on-write B+tree: folds a sorted run of changes into a tree
// and returns the new tree, writing every changed page to a free page and never touching
// a page of the old tree (which snapshots may still read).
//
// A leaf that receives changes is merged and rewritten, split into as many pages as its
// entries need (leaves side by side that all receive changes are rewritten as one run,
// their entries spread evenly over the pages they need: `LeafGroup`); a leaf left empty
// disappears. A branch whose children changed is rebuilt
// from their replacements the same way, up to the root; new levels appear when the root
// splits and single-child roots are collapsed. Pages are not merged when they shrink
// (deletes can leave pages under-full; `verify` reports fill).
//
// A new value is encoded straight from its memtable node into its page (`CellToWrite`),
// and pages written at consecutive IDs go out as one write per run: measured under
// callgrind on fillseq, the tree writer went from 3,310 to 620 instructions per key. A
// cell kept from a leaf it rewrites is copied from that leaf's bytes (`StoredCell`), not
// decoded into arrays of its own: at 1M random keys under `EngineOptions.smallFootprint`,
// whose checkpoints bound the rate, that took fillrandom from 164–218k to 274–309k keys/s.
// Called only by the checkpoint (and the vacuum's relocation), on one thread.
import StrataCodec

struct PageAllocator {
    /// Pages free to write now, as runs of consecutive IDs in ascending order. Single pages
    /// are handed out lowest first; a run of several (an overflow value's) from the first
    /// free run long enough, or from the end of the file.
    private var extents: [(start: UInt64, count: UInt64)] = []
    /// Extents before this one are used up.
    private var head = 0
    /// For each length of run asked for, the first extent that may hold one: every extent
    /// before it was shorter, and extents only shrink, so each search starts where the last
    /// of its length stopped (a checkpoint storing many values of one size scans the free
    /// pages about once, not once per value).
    private var searchFrom: [Int: Int] = [:]
    /// Every page ID is below this.
    private(set) var pageCount: UInt64
    /// Pages this allocator handed out, as runs of consecutive IDs in the order given (a
    /// checkpoint hands out tens of thousands, mostly one after another).
    private var allocatedRuns: [(start: UInt64, count: UInt64)] = []
    /// Pages this allocator handed out, in the order given.
    var allocated: [PageID] {
        allocatedRuns.flatMap { run in (run.start..<run.start + run.count).map { PageID($0) } }
    }

    init(reusable: [PageID], pageCount: UInt64) {
        for id in reusable.sorted() {
            if let last = extents.last, last.start + last.count == id.rawValue {
                extents[extents.count - 1].count += 1
            } else if extents.last.map({ $0.start + $0.count < id.rawValue }) ?? true {
                extents.append((id.rawValue, 1))
            }
        }
        self.pageCount = max(pageCount, 2)
    }

    mutating func allocate() throws -> PageID {
        while head < extents.count && extents[head].count == 0 { head += 1 }
        let id: PageID
        if head < extents.count {
            id = PageID(extents[head].start)
            extents[head].start += 1
            extents[head].count -= 1
        } else {
            guard pageCount < Limits.maxPageCount else { throw EngineError.invalidOptions("the data file reached its page limit") }
            id = PageID(pageCount)
            pageCount += 1
        }
        noteAllocated(id.rawValue, count: 1)
        return id
    }

    /// The first of `count` consecutive pages, all handed out.
    mutating func allocateRun(_ count: Int) throws -> PageID {
        precondition(count > 0, "allocating an empty run")
        if count == 1 { return try allocate() }
        var index = max(head, searchFrom[count] ?? 0)
        while index < extents.count && extents[index].count < UInt64(count) { index += 1 }
        searchFrom[count] = index
        let first: UInt64
        if index < extents.count {
            first = extents[index].start
            extents[index].start += UInt64(count)
            extents[index].count -= UInt64(count)
        } else {
            guard pageCount + UInt64(count) <= Limits.maxPageCount else {
                throw EngineError.invalidOptions("the data file reached its page limit")
            }
            first = pageCount
            pageCount += UInt64(count)
        }
        noteAllocated(first, count: UInt64(count))
        return PageID(first)
    }

    private mutating func noteAllocated(_ first: UInt64, count: UInt64) {
        if let last = allocatedRuns.last, last.start + last.count == first {
            allocatedRuns[allocatedRuns.count - 1].count += count
        } else {
            allocatedRuns.append((first, count))
        }
    }

    /// Takes every reusable page out, highest first (for the free list's own storage
    /// decision, which takes its pages from the end of the array: the lowest).
    mutating func takeReusable() -> [PageID] {
        defer {
            extents.removeAll()
            head = 0
            searchFrom.removeAll()
        }
        // One array of the exact size: at a million records the free pages number tens of
        // thousands, and a checkpoint's lists of them were most of its own memory.
        var pages: [PageID] = []
        pages.reserveCapacity(extents[head...].reduce(0) { $0 + Int($1.count) })
        for extent in extents[head...].reversed() {
            var page = extent.start + extent.count
            while page > extent.start {
                page -= 1
                pages.append(PageID(page))
            }
        }
        return pages
    }
}

/// Thrown by a `TreeWriter` asked to stop (`stops`): what it wrote lies in pages free to
/// write (free in the newest durable meta page and read by no pinned tree) or past the
/// page count, and the checkpoint publishes no tree.
struct CheckpointStopped: Error {}

struct TreeWriter {
    let file: PageFile
    let generation: UInt64
    /// Tombstones at or below this version are dropped instead of kept: no live snapshot
    /// is old enough to conflict with them.
    let purgeTombstonesThrough: UInt64
    var allocator: PageAllocator
    /// Every page of the tree being rewritten is below this (the durable meta page's page
    /// count): an overflow value that names a page past it is corrupt, never freed.
    let oldPageCount: UInt64
    /// Pages of the old tree (and overflow pages) this rewrite replaced.
    var freed: [PageID] = []
    /// Live keys added minus live keys removed.
    var keyCountDelta = 0
    /// The most leaves one group of this rewrite gathered (`LeafGroup`, at most
    /// `maxGroupLeaves`).
    private(set) var largestGroupLeaves = 0
    /// Pages encoded at consecutive IDs and not yet written: a run takes one write instead
    /// of one per page (new pages are mostly allocated in a row at the end of the file).
    private var gathered: [UInt8] = []
    private var gatheredStart = PageID.none

    /// Whether leaves whose cells outgrow a page are stored LZ4-compressed
    /// (CompressedLeaf.swift) instead of split.
    let compressesLeaves: Bool
    /// Whether values too large for a leaf are written as chains of pages, as format 4
    /// wrote them, instead of runs (tests of stores that older builds wrote).
    let writesChains: Bool
    /// A compressed leaf's LZ4 block ÷ its body, as the leaves compressed so far came out
    /// (a first guess before any): how many bytes of cells a compressed leaf is given.
    private var blockRatio = 0.5
    /// Leaves are given cells for a block this much larger than the ratio predicts: a block
    /// that turns out too large splits its leaf in two.
    static let ratioMargin = 1.04
    /// Where a leaf's LZ4 block is made before it is known to fit its page.
    private var scratch: [UInt8] = []

    private var pageBytes: Int { file.pageBytes }
    /// How full a leaf split among existing keys leaves each page.
    static let splitFill = (numerator: 15, denominator: 16)
    private var capacity: Int { PageCodec.hintedCapacity(pageBytes: pageBytes) }
    /// The most bytes of cells one leaf may hold: a page's, or, compressing, an expansion's.
    private var leafLimit: Int {
        compressesLeaves ? PageCodec.maxExpandedCapacity(pageBytes: pageBytes) : capacity
    }
    /// Bytes of cells a leaf is given: a page's, or, compressing, what a page's block is
    /// expected to hold at the ratio seen so far (never less than a page's).
    private var leafCapacity: Int {
        guard compressesLeaves else { return capacity }
        let expected = Double(pageBytes - PageCodec.compressedBlockStart) / (blockRatio * Self.ratioMargin) - 2
        return max(capacity, min(PageCodec.maxExpandedCapacity(pageBytes: pageBytes), Int(expected)))
    }

    /// Largest run of pages gathered before it is written.
    static let runBytes = 256 << 10
    /// Told of each run written: a background checkpoint's priority follows the commits.
    private let pacer: CheckpointPacer?
    /// Asked after each run written whether to stop, with the pages written so far and
    /// the old tree's pages they replace: when it answers true the writer throws
    /// `CheckpointStopped` (a background checkpoint a close stops: `StorageEngine.close()`).
    private let stops: ((_ pagesWritten: Int, _ pagesReplaced: Int) -> Bool)?
    /// Pages written so far (runs written, not the one being gathered).
    private var pagesWritten = 0

    init(file: PageFile, generation: UInt64, purgeTombstonesThrough: UInt64, allocator: PageAllocator,
         compressesLeaves: Bool = false, writesChains: Bool = false, pacer: CheckpointPacer? = nil,
         stops: ((_ pagesWritten: Int, _ pagesReplaced: Int) -> Bool)? = nil) {
        self.pacer = pacer
        self.stops = stops
        self.writesChains = writesChains
        self.file = file
        self.generation = generation
        self.purgeTombstonesThrough = purgeTombstonesThrough
        self.allocator = allocator
        oldPageCount = allocator.pageCount
        self.compressesLeaves = compressesLeaves
    }

    /// Adds `page` (one page, or an overflow run's several) to the run of pages being
    /// gathered, writing that run first when `id` does not follow it or it is full.
    private mutating func write(_ page: [UInt8], at id: PageID) throws {
        let pages = gathered.count / pageBytes
        if pages > 0 && (id.rawValue != gatheredStart.rawValue + UInt64(pages) || gathered.count >= Self.runBytes) { try writeRun() }
        if gathered.isEmpty {
            gatheredStart = id
            gathered.reserveCapacity(Self.runBytes)
        }
        gathered += page
    }

    /// Writes the gathered run. `apply` and `relocate` call it before they return (and
    /// before reading a page this writer may have written).
    private mutating func writeRun() throws {
        guard !gathered.isEmpty else { return }
        try gathered.withUnsafeBytes { try file.write(pages: $0, from: gatheredStart) }
        pagesWritten += gathered.count / pageBytes
        gathered.removeAll(keepingCapacity: true)
        pacer?.ranOn()
        if let stops, stops(pagesWritten, freed.count) { throw CheckpointStopped() }
    }

    /// Folds `changes` (memtable nodes sorted by key, one per key; a node without a value
    /// deletes) into `tree`. The nodes are read in place: the checkpoint copies nothing of
    /// the memtable it folds, so its memory is not held twice.
    mutating func apply(_ changes: [MemtableNode], to tree: BTree) throws -> BTree {
        guard !changes.isEmpty else { return tree }
        // Every key obeys the limit before anything is written: a cell no page can hold
        // would leave the writer without progress.
        if let bad = changes.first(where: { $0.key.isEmpty || $0.key.count > Limits.maxKeyBytes }) {
            throw EngineError.keyTooLarge(byteCount: bad.key.count, limit: Limits.maxKeyBytes)
        }
        var entries: [BranchEntry]
        var height = tree.height
        if tree.root == .none {
            entries = try writeMerged([], changes[...], lower: [], packFull: true)
            height = 1
        } else {
            entries = try rewrite(tree.root, level: 1, height: tree.height, lower: [], changes: changes[...])
        }
        guard !entries.isEmpty else {
            try writeRun()
            return .empty
        }
        while entries.count > 1 {
            entries = try writeBranches(entries)
            height += 1
        }
        try writeRun()
        var root = entries[0].child
        // A root with one child is replaced by that child.
        while height > 1, case let .branch(children) = try file.node(root), children.count == 1 {
            freed.append(root)
            root = children[0].child
            height -= 1
        }
        return BTree(root: root, height: height)
    }

    /// Leaves side by side under one branch that a checkpoint rewrites (at most
    /// `maxGroupLeaves` of them): their entries in order, the changes that fall in them,
    /// and the lower bound of the first. Written as one run, their entries are spread
    /// evenly over as many leaves as they need (the last one taking what the others
    /// left), instead of each leaf being split on its own: under random inserts every leaf
    /// grows at the same pace, splits at the same checkpoint and is left half full, so
    /// rewritten one by one the leaves averaged 61 % full (400,000 random keys, compressed
    /// leaves); the pages are rewritten either way, so this costs no write.
    private struct LeafGroup {
        var lower: [UInt8]
        var entries: [StoredCell]
        var changes: Range<Int>
        /// How many leaves the entries came from.
        var leaves = 0
    }

    /// Writes a group of leaves (see `LeafGroup`); `changes` is the slice its range indexes.
    private mutating func writeGroup(_ group: LeafGroup, _ changes: ArraySlice<MemtableNode>) throws -> [BranchEntry] {
        largestGroupLeaves = max(largestGroupLeaves, group.leaves)
        let mine = changes[group.changes]
        // Keys only after the last entry (sequential inserts) pack new leaves full.
        let appending = group.entries.last.map { last in
            last.withKey { compareBytes(mine[mine.startIndex].key, $0) > 0 }
        } ?? true
        return try writeMerged(group.entries, mine, lower: group.lower, packFull: appending, leaves: group.leaves)
    }

    private mutating func rewrite(_ id: PageID, level: Int, height: Int, lower: [UInt8],
                                  changes: ArraySlice<MemtableNode>) throws -> [BranchEntry] {
        freed.append(id)
        switch try file.storedNode(id) {
        case let .leaf(entries):
            guard level == height else { throw corrupt(file, id, "a leaf above the bottom level") }
            // Keys only after the leaf's last one (sequential inserts) pack new leaves full;
            // changes among its keys split it into leaves with room for the next checkpoint's.
            let appending = entries.last.map { last in
                last.withKey { compareBytes(changes[changes.startIndex].key, $0) > 0 }
            } ?? true
            return try writeMerged(entries, changes, lower: lower, packFull: appending)
        case var .branch(children):
            guard level < height else { throw corrupt(file, id, "a branch where a leaf belongs") }
            children[0].key = lower
            var replaced: [BranchEntry] = []
            var rest = changes
            // Leaves side by side that all take changes are rewritten as one run (see
            // `LeafGroup`); any other child on its own.
            var group: LeafGroup?
            for (index, child) in children.enumerated() {
                let end = index + 1 < children.count ? children[index + 1].key : nil
                let split = end.map { bound in
                    bound.withUnsafeBytes { bound in rest.firstIndex { compareBytes($0.key, bound) >= 0 } } ?? rest.endIndex
                } ?? rest.endIndex
                let mine = rest[rest.startIndex..<split]
                rest = rest[split...]
                if mine.isEmpty {
                    if let pending = group.take() { replaced += try writeGroup(pending, changes) }
                    replaced.append(child)
                } else if level + 1 == height {
                    freed.append(child.child)
                    guard case let .leaf(entries) = try file.storedNode(child.child) else {
                        throw corrupt(file, child.child, "a branch at the bottom level")
                    }
                    var grown = group.take() ?? LeafGroup(lower: child.key, entries: [], changes: mine.startIndex..<mine.startIndex)
                    grown.entries += entries
                    grown.leaves += 1
                    grown.changes = grown.changes.lowerBound..<mine.endIndex
                    if grown.leaves >= Self.maxGroupLeaves {
                        replaced += try writeGroup(grown, changes)
                    } else {
                        group = grown
                    }
                } else {
                    replaced += try rewrite(child.child, level: level + 1, height: height, lower: child.key, changes: mine)
                }
            }
            if let pending = group.take() { replaced += try writeGroup(pending, changes) }
            guard !replaced.isEmpty else { return [] }
            replaced[0].key = lower
            return try writeBranches(replaced)
        }
    }

    /// Copies every page of the subtree at `id` numbered at or above `cutoff` to a page
    /// from the allocator, and every branch above such a page, copy-on-write like any
    /// rewrite; returns the subtree's root afterwards (`id` itself when nothing moved).
    /// Overflow pages are not moved: the caller makes sure none lies at or above `cutoff`.
    /// Throws `RelocationStopped` when a page to move does not fit one page of the current
    /// format; the pages written until then lie in free space no meta page reaches.
    mutating func relocate(_ id: PageID, level: Int, height: Int, above cutoff: UInt64) throws -> PageID {
        let root = try relocateSubtree(id, level: level, height: height, above: cutoff)
        try writeRun()
        return root
    }

    private mutating func relocateSubtree(_ id: PageID, level: Int, height: Int, above cutoff: UInt64) throws -> PageID {
        // A leaf that stays is not even read.
        if level == height && id.rawValue < cutoff { return id }
        var node = try file.storedNode(id)
        var moved = id.rawValue >= cutoff
        switch node {
        case .leaf:
            guard level == height else { throw corrupt(file, id, "a leaf above the bottom level") }
        case var .branch(children):
            guard level < height else { throw corrupt(file, id, "a branch where a leaf belongs") }
            for index in children.indices {
                let child = try relocateSubtree(children[index].child, level: level + 1, height: height, above: cutoff)
                if child != children[index].child {
                    children[index].child = child
                    moved = true
                }
            }
            node = .branch(children)
        }
        guard moved else { return id }
        // A page of an older format may hold more than one page of this format can, and a
        // compressed leaf more than this writer may compress: neither is split here (the
        // next checkpoint that changes it does that), so the move stops.
        switch node {
        case let .leaf(stored):
            let cells = stored.map(CellToWrite.stored)[...]
            guard compressesLeaves || PageCodec.leafBytes(cells) <= capacity,
                  cells.reduce(0, { $0 + $1.cellBytes }) <= PageCodec.maxExpandedCapacity(pageBytes: pageBytes),
                  case .page(var page, _) = PageCodec.encodeLeafPage(cells: cells, id: .none, generation: generation, pageBytes: pageBytes,
                                                                     compress: compressesLeaves, scratch: &scratch)
            else { throw RelocationStopped(page: id) }
            freed.append(id)
            let target = try allocator.allocate()
            PageCodec.readdress(&page, to: target)
            try write(page, at: target)
            return target
        case let .branch(children):
            guard PageCodec.branchFits(children, pageBytes: pageBytes) else { throw RelocationStopped(page: id) }
            freed.append(id)
            let target = try allocator.allocate()
            try write(PageCodec.encodeBranch(children[...], id: target, generation: generation, pageBytes: pageBytes), at: target)
            return target
        }
    }

    /// Merges a leaf's cells with the changes that fall in it. A change whose cell fits
    /// the page stays a reference to its memtable node until it is encoded, and a kept
    /// cell a reference to the leaf it was read from.
    private mutating func merge(_ old: ArraySlice<StoredCell>, _ changes: ArraySlice<MemtableNode>) throws -> [CellToWrite] {
        var result: [CellToWrite] = []
        result.reserveCapacity(old.count + changes.count)
        var oldIndex = old.startIndex
        for change in changes {
            let key = change.key
            var order = 1
            while oldIndex < old.endIndex {
                order = old[oldIndex].withKey { compareBytes($0, key) }
                guard order < 0 else { break }
                keep(old[oldIndex], into: &result)
                oldIndex += 1
            }
            var wasLive = false
            if oldIndex < old.endIndex && order == 0 {
                wasLive = !old[oldIndex].isTombstone
                if let value = old[oldIndex].largeValue {
                    freed += try file.overflowPages(value, below: oldPageCount)
                }
                oldIndex += 1
            }
            if let value = change.value {
                // Inline when its cell (counted with version 0) fits, else an overflow run.
                if LeafEntry.cellBytes(keyCount: key.count, version: 0, inlineValueCount: value.count)
                    <= Limits.maxInlineCellBytes(pageBytes: pageBytes) {
                    result.append(.node(change))
                } else {
                    result.append(.entry(LeafEntry(key: Array(key), version: change.version, payload: try storeOverflow(value))))
                }
                if !wasLive { keyCountDelta += 1 }
            } else {
                if wasLive { keyCountDelta -= 1 }
                if change.version > purgeTombstonesThrough { result.append(.node(change)) }
            }
        }
        while oldIndex < old.endIndex {
            keep(old[oldIndex], into: &result)
            oldIndex += 1
        }
        return result
    }

    private func keep(_ cell: StoredCell, into result: inout [CellToWrite]) {
        if cell.isTombstone && cell.version <= purgeTombstonesThrough { return }
        result.append(.stored(cell))
    }

    /// Writes a value too large for its leaf as an overflow run (OverflowRun.swift);
    /// returns its payload. Compressing leaves, a value whose LZ4 block takes at most 7/8
    /// of it is stored as that block, its run marked (FORMAT.md, "Overflow pages").
    private mutating func storeOverflow(_ value: UnsafeRawBufferPointer) throws -> Payload {
        guard compressesLeaves else { return try storeRun(value, byteCount: value.count) }
        let bound = LZ4Block.compressBound(value.count)
        if scratch.count < bound { scratch = [UInt8](repeating: 0, count: bound) }
        let block = scratch.withUnsafeMutableBytes {
            LZ4Block.compress(value, into: $0, acceleration: PageCodec.leafAcceleration)
        }
        guard let block, block * PageCodec.compressionWorthwhile.denominator <= value.count * PageCodec.compressionWorthwhile.numerator else {
            return try storeRun(value, byteCount: value.count)
        }
        let stored = Array(scratch[..<block])
        return try stored.withUnsafeBytes { try storeRun($0, byteCount: value.count) }
    }

    /// Writes `data` (the value, or its LZ4 block when shorter) as an overflow run for a
    /// value of `byteCount` bytes (or, for the tests of older stores, as a chain of format
    /// 4: `writesChains`).
    private mutating func storeRun(_ data: UnsafeRawBufferPointer, byteCount: Int) throws -> Payload {
        if writesChains { return try storeChain(data, marked: data.count < byteCount, byteCount: byteCount) }
        let first = try allocator.allocateRun(PageCodec.runPages(storing: data.count, pageBytes: pageBytes))
        let (pages, checksum) = PageCodec.encodeRun(data, pageBytes: pageBytes)
        try write(pages, at: first)
        return .overflow(LargeValue(first: first, byteCount: byteCount, run: LargeValue.Run(stored: data.count, checksum: checksum)))
    }

    /// Writes `data` as an overflow chain (format 4) for a value of `byteCount` bytes.
    private mutating func storeChain(_ data: UnsafeRawBufferPointer, marked: Bool, byteCount: Int) throws -> Payload {
        let perPage = PageCodec.overflowCapacity(pageBytes: pageBytes)
        var ids: [PageID] = []
        for _ in stride(from: 0, to: data.count, by: perPage) { ids.append(try allocator.allocate()) }
        for (index, id) in ids.enumerated() {
            let start = index * perPage
            let next = index + 1 < ids.count ? ids[index + 1] : .none
            try write(PageCodec.encodeOverflow(UnsafeRawBufferPointer(rebasing: data[start..<min(data.count, start + perPage)]),
                                               next: next, id: id, generation: generation, pageBytes: pageBytes,
                                               marked: marked && index == 0), at: id)
        }
        return .overflow(.chain(first: ids[0], byteCount: byteCount))
    }

    /// Changes merged into one leaf at a time are at most this many: a larger run (the
    /// first checkpoint of a store, sequential inserts past the last key) is merged and
    /// written piece by piece, so a checkpoint never holds a whole memtable as entries.
    static let mergePieceChanges = 4_096

    /// The most leaves one `LeafGroup` gathers: the group holds their pages and cells until
    /// it is written. Under a branch of a few hundred leaves that all take changes, a whole
    /// branch's group took 1.8 MB of a small store's 10.1 MiB heap at its peak (massif,
    /// records-count at 100,000 records with `EngineOptions.smallFootprint`; 0.5 MB in
    /// groups of 32). The price is a page now and then: each group's last leaf takes what
    /// the others left, and groups of 32 took 0.3–0.4 % more bytes on disk after a random
    /// fill and an overwrite of 1M keys, 1.0 % in the stores of 100,000 records.
    static let maxGroupLeaves = 32

    /// Merges `old` (a leaf's entries) with `changes` and writes the result as leaves (see
    /// `writeLeaves`); a run of more than `mergePieceChanges` changes is merged piece by
    /// piece into the same sequence of leaves, each filled to `splitFill` of the page (what
    /// an even spread of that many entries comes to) or to the brim with `packFull`.
    private mutating func writeMerged(_ old: [StoredCell], _ changes: ArraySlice<MemtableNode>, lower: [UInt8],
                                      packFull: Bool, leaves: Int = 1) throws -> [BranchEntry] {
        guard changes.count > Self.mergePieceChanges else {
            return try writeLeaves(merge(old[...], changes), lower: lower, packFull: packFull, leaves: leaves)
        }
        var run = LeafRun(target: nil, fill: packFull ? (1, 1) : Self.splitFill, limit: leafLimit, lower: lower)
        var rest = old[...]
        var start = changes.startIndex
        while start < changes.endIndex {
            let end = min(start + Self.mergePieceChanges, changes.endIndex)
            // The old entries below the next piece's first key merge with this piece.
            let split = end == changes.endIndex ? rest.endIndex : changes[end].key.withUnsafeBytes { bound in
                rest.firstIndex { $0.withKey { compareBytes($0, bound) } >= 0 } ?? rest.endIndex
            }
            for entry in try merge(rest[..<split], changes[start..<end]) { try add(entry, to: &run) }
            rest = rest[split...]
            start = end
        }
        try flush(&run)
        return run.written
    }

    /// Writes entries as leaves and returns one branch entry per leaf. Entries that fit one
    /// page take one. Otherwise, with `packFull`, each leaf is filled to the page; without,
    /// the entries are spread evenly over as many leaves as filling each to `splitFill` of
    /// the page needs, so later inserts among them fit without splitting again (a leaf
    /// filled to the brim splits at the next checkpoint that adds one key to it, leaving a
    /// nearly empty page beside it).
    private mutating func writeLeaves(_ entries: [CellToWrite], lower: [UInt8], packFull: Bool, leaves: Int = 1) throws -> [BranchEntry] {
        var total = entries.reduce(0) { $0 + $1.cellBytes }
        // A raw leaf stores its keys' shared prefix once: at least the prefix all of
        // `entries` share, so they take at most this much (compressed leaves keep whole keys).
        if !compressesLeaves { total -= PageCodec.sharedPrefix(entries[...]) * (entries.count - 1) }
        let capacity = leafCapacity
        var target: Int?
        if compressesLeaves && total <= PageCodec.maxExpandedCapacity(pageBytes: pageBytes) {
            // One leaf, when its block fits; `writeLeaf` splits it by the block's size if not.
            target = total
        } else if !packFull && total > capacity {
            let fill = capacity * Self.splitFill.numerator / Self.splitFill.denominator
            var pages = (total + fill - 1) / fill
            // Entries that still fit the `leaves` pages they came from keep that many (an
            // overwrite in place adds no page); only a run that outgrew them gets room to spare.
            if total <= leaves * capacity { pages = min(pages, leaves) }
            target = (total + pages - 1) / pages
        }
        var run = LeafRun(target: target, fill: (1, 1), limit: leafLimit, lower: lower)
        for entry in entries { try add(entry, to: &run) }
        try flush(&run)
        return run.written
    }

    /// Leaves being filled in key order: the entries of the one not yet written, and a
    /// branch entry for each written one.
    private struct LeafRun {
        /// A leaf is written once its cells reach `target` bytes, or when nil, `fill` of the
        /// writer's `leafCapacity` as it stands (compressing, it follows the blocks made so
        /// far); or when the next cell would pass `limit`, what one leaf may hold.
        let target: Int?
        let fill: (numerator: Int, denominator: Int)
        let limit: Int
        let lower: [UInt8]
        var pending: [CellToWrite] = []
        /// The bytes of the pending cells with their whole keys.
        var used = 0
        /// The prefix the pending cells' keys share (their first and last keys').
        var prefix = 0
        var written: [BranchEntry] = []

        init(target: Int?, fill: (numerator: Int, denominator: Int), limit: Int, lower: [UInt8]) {
            self.target = target
            self.fill = fill
            self.limit = limit
            self.lower = lower
        }

        /// The bytes of `count` cells of `used` bytes whose keys share `prefix`: in a raw
        /// leaf (`elided`), every key less the prefix and the prefix once (a key's length may
        /// take a byte less, so this is at most one more per cell than `PageCodec.leafBytes`);
        /// else with their whole keys, as a compressed leaf's block holds them.
        static func bytes(used: Int, count: Int, prefix: Int, elided: Bool) -> Int {
            elided && count > 0 ? used - (count - 1) * prefix : used
        }

        /// The bytes the pending cells take in their leaf, raw (`elided`) or compressed.
        func size(elided: Bool) -> Int { Self.bytes(used: used, count: pending.count, prefix: prefix, elided: elided) }
    }

    /// Adds the next entry, writing the pending leaf first when it is full. Without
    /// compression a leaf is raw, and counts its keys without their shared prefix; with it,
    /// a leaf is given cells by their whole keys, what its block compresses, unless it is
    /// given no more than a raw page holds (values that do not compress).
    private mutating func add(_ entry: CellToWrite, to run: inout LeafRun) throws {
        let bytes = entry.cellBytes
        let target = run.target ?? leafCapacity * run.fill.numerator / run.fill.denominator
        if let first = run.pending.first {
            let prefix = min(run.prefix, first.withKey { first in entry.withKey { PageCodec.commonPrefix(first, $0) } })
            let raw = !compressesLeaves
            if run.size(elided: raw || target <= capacity) < target
                && LeafRun.bytes(used: run.used + bytes, count: run.pending.count + 1, prefix: prefix, elided: raw) <= run.limit {
                run.pending.append(entry)
                run.used += bytes
                run.prefix = prefix
                return
            }
            try flush(&run)
        }
        run.pending.append(entry)
        run.used = bytes
        run.prefix = entry.keyCount
    }

    /// Writes the pending entries as one leaf, or as several when they are compressed and
    /// their block does not fit a page. Every leaf holds at least one entry; a cell no
    /// page can hold (a key over the limit that got past every check) is refused before
    /// anything is written.
    private mutating func flush(_ run: inout LeafRun) throws {
        guard !run.pending.isEmpty else { return }
        guard run.size(elided: !compressesLeaves) <= leafLimit else {
            throw EngineError.keyTooLarge(byteCount: run.pending[0].key.count, limit: Limits.maxKeyBytes)
        }
        try writeLeaf(run.pending[...], id: nil, into: &run)
        run.pending.removeAll(keepingCapacity: true)
        run.used = 0
        run.prefix = 0
    }

    /// Writes `cells` as one leaf at `id` (or a page from the allocator); when they are
    /// compressed and the block does not fit, as many leaves as the block's size asks for,
    /// each a run of about equal bytes (one cell always fits a page raw, so this ends).
    private mutating func writeLeaf(_ cells: ArraySlice<CellToWrite>, id: PageID?, into run: inout LeafRun) throws {
        let id = try id ?? allocator.allocate()
        switch PageCodec.encodeLeafPage(cells: cells, id: id, generation: generation, pageBytes: pageBytes,
                                        compress: compressesLeaves, scratch: &scratch) {
        case let .page(page, ratio):
            if let ratio { blockRatio = (blockRatio + ratio) / 2 }
            try write(page, at: id)
            run.written.append(BranchEntry(key: run.written.isEmpty ? run.lower : cells[cells.startIndex].key, child: id))
        case let .tooLarge(ratio, blockBytes, room):
            blockRatio = (blockRatio + ratio) / 2
            guard cells.count > 1 else { throw EngineError.keyTooLarge(byteCount: cells[cells.startIndex].key.count, limit: Limits.maxKeyBytes) }
            let room = room * Self.splitFill.numerator / Self.splitFill.denominator
            let parts = min(cells.count, max(2, (blockBytes + room - 1) / room))
            let total = cells.reduce(0) { $0 + $1.cellBytes }
            // Cut where the bytes before reach 1/parts, 2/parts, … of the total; at least once.
            var cuts: [Int] = []
            var used = 0
            for index in cells.indices.dropFirst() {
                used += cells[index - 1].cellBytes
                if cuts.count + 1 < parts && used * parts >= total * (cuts.count + 1) { cuts.append(index) }
            }
            if cuts.isEmpty { cuts = [cells.endIndex - 1] }
            var start = cells.startIndex
            for (position, cut) in (cuts + [cells.endIndex]).enumerated() {
                try writeLeaf(cells[start..<cut], id: position == 0 ? id : nil, into: &run)
                start = cut
            }
        }
    }

    /// Writes entries as full branches; returns one entry per branch for the level above.
    private mutating func writeBranches(_ entries: [BranchEntry]) throws -> [BranchEntry] {
        var result: [BranchEntry] = []
        var start = 0
        while start < entries.count {
            // The first entry's key is not stored in its page, but it is counted: simple and safe.
            var used = 0
            var end = start
            while end < entries.count && (end - start < 2 || used + entries[end].cellBytes <= capacity) {
                used += entries[end].cellBytes
                end += 1
            }
            // Two cells always fit a branch page when keys obey the limit; refuse before writing if not.
            guard used <= capacity else {
                let longest = entries[start..<end].map(\.key.count).max() ?? 0
                throw EngineError.keyTooLarge(byteCount: longest, limit: Limits.maxKeyBytes)
            }
            let id = try allocator.allocate()
            try write(PageCodec.encodeBranch(entries[start..<end], id: id, generation: generation, pageBytes: pageBytes), at: id)
            result.append(BranchEntry(key: entries[start].key, child: id))
            start = end
        }
        return result
    }
}

/// A page `relocate` would have to split to move (an older format's full page).
struct RelocationStopped: Error {
    let page: PageID
}
