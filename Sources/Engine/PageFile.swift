// The data file: reading verified pages, writing pages during a checkpoint, and the two
// meta pages (FORMAT.md, "Page file").
//
// Tree pages are read through a shared read-only mapping of the file where the file
// system maps files (the real one), and through a bounded page cache over pread where it
// does not (the simulated one) or the store was opened not to map it
// (`EngineOptions.mapsDataFile`, which bounds the memory its pages take). Why a mapping
// (measured with perf, readrandom of 1M keys from a 133 MB store, 2026-11-23): with the
// cache, pread copies and the kernel's page lookup took 14 % of read time and the cache's
// hashing, mutex and reference counting another 12 %; a mapped page costs a bounds check
// and one load of its "verified" bit.
// What the cache gave is kept: every page's checksum, type and ID, and every overflow run's
// checksum, are verified before their first use through a mapping (a bit per page, a run's
// on its first page, cleared whenever the page is rewritten),
// and no byte at or past the file's known end is touched, so a short or corrupt file is
// `EngineError.corruptPage`, never a SIGBUS. The memory is the kernel's page cache,
// shared with other processes and given back under pressure. Out of the fault model:
// another program truncating the file while the store is open (that faults, as it does
// for every mapped engine).
//
// Invariants:
//  PageFile.P1. A page is written only while it is free in the durable meta page and no snapshot
//      can reach it (the checkpoint's allocator guarantees it), so readers never see a
//      page change under them.
//  PageFile.P2. Every page read from disk is verified before use; a bad page is
//      `EngineError.corruptPage` with the file and offset, never a trap.
//  PageFile.P3. A mapped page is read only below `filePages`, the file's size as this process
//      knows it (set at open, raised after a write past the end, lowered before a cut).
// Thread-safety: reads from any thread; writes only from the one running checkpoint.
import Atomics
import CStrataPlatform
import StrataCodec
import StrataFileIO
import Synchronization

final class PageFile: Sendable {
    let path: String
    let file: any OpenFile
    let pageBytes: Int
    let cache: PageCache

    /// A mapping of the file and a "verified" bit per page it covers.
    private struct Region {
        let base: UnsafeRawPointer
        /// Pages the mapping covers (the file may hold fewer: PageFile.P3).
        let pages: Int
        /// One bit per page the mapping's span may ever cover, 64 to a word (sparse memory:
        /// only the words of pages read take any); shared by the regions of one mapping.
        /// Bits, not bytes: every read of a mapped page loads its bit, and at a million
        /// 1 KB records the bytes (350 KB) missed the CPU's caches on most reads.
        let verified: UnsafeMutablePointer<UnsafeAtomic<UInt64>.Storage>
        /// The bits' bytes, when this region allocated them (0 when an earlier region of
        /// the same mapping did).
        let ownedFlags: Int
    }

    /// The current region's address (a `Region` allocated below), or 0 when tree pages are
    /// read through the cache. A mapping grows in place, into the span of address space
    /// it reserved (`reservedMappingBytes`), and its regions share their flags: a page
    /// read before the file grew is neither faulted in again nor verified again, and
    /// counts once in the resident set (each new mapping of the whole file counted every
    /// page read again: readwhilewriting's writer peaked at 561 MB, most of it the data
    /// file mapped nine times). Only a file past the span gets a new mapping, and earlier
    /// ones stay mapped until the file is closed: a reader that loaded one may still be
    /// using it.
    private let currentRegion = Atomic<Int>(0)
    /// Every mapping made, and its region.
    private let regions = Mutex<[(mapping: FileMapping, region: Int)]>([])
    /// Whole pages the file holds (PageFile.P3).
    private let filePages: Atomic<Int>
    /// Set by the store's close: tree reads throw `EngineError.closed` from then on (a
    /// snapshot kept past the close must not read a page the close moved or cut off, and
    /// must not call that a corrupt page).
    private let closed = Atomic(false)
    /// Bytes written since the last writeback was started or the file synced.
    private let unflushedBytes = Atomic(0)
    /// See `noteWritten`: RocksDB's `bytes_per_sync` does the same with 1 MiB.
    static let writebackBytes = 1 << 20

    /// The smallest mapping, in pages: virtual address space only.
    static let smallestMappingPages = 256
    /// The address space a mapping reserves to grow into: no memory until pages are read.
    static let reservedMappingBytes = 1 << 36

    /// Reads pages through a mapping of the file when `maps` and the file system maps
    /// files, and through the page cache of `cachePages` pages otherwise.
    init(path: String, file: any OpenFile, pageBytes: Int, cachePages: Int, maps: Bool = true) throws(EngineError) {
        self.path = path
        self.file = file
        self.pageBytes = pageBytes
        self.cache = PageCache(capacityBytes: cachePages * pageBytes, pageBytes: pageBytes)
        let size: Int64
        do { size = try file.size() } catch { throw EngineError.io(error as? FileIOError ?? .closed(operation: .size, path: path)) }
        filePages = Atomic(Int(size / Int64(pageBytes)))
        // Without a mapping at open, none is made later: writes and `followWriter` only
        // grow one that exists.
        if maps { mapCovering(filePages.load(ordering: .relaxed)) }
    }

    deinit {
        regions.withLock { regions in
            for (_, address) in regions {
                let region = UnsafeMutablePointer<Region>(bitPattern: address)!
                if region.pointee.ownedFlags > 0 {
                    MappedMemory.deallocate(UnsafeMutableRawPointer(region.pointee.verified), byteCount: region.pointee.ownedFlags)
                }
                region.deallocate()
            }
        }
    }

    /// Maps the file anew, covering at least `pages` pages with room to grow, and makes it
    /// the current region; reads fall back to the cache if the file system maps nothing or
    /// the mapping fails (address space exhausted).
    private func mapCovering(_ pages: Int) {
        let capacity = max(Self.smallestMappingPages, 2 * pages)
        regions.withLock { regions in
            // In place, when the current mapping's span holds it.
            if let (mapping, address) = regions.last, file.growMapping(mapping, to: capacity * pageBytes) {
                let grown = UnsafeMutablePointer<Region>.allocate(capacity: 1)
                grown.initialize(to: Region(base: mapping.base, pages: capacity,
                                            verified: UnsafePointer<Region>(bitPattern: address)!.pointee.verified, ownedFlags: 0))
                regions.append((mapping, Int(bitPattern: grown)))
                currentRegion.store(Int(bitPattern: grown), ordering: .releasing)
                return
            }
            let reserving = max(capacity * pageBytes, Self.reservedMappingBytes)
            guard let mapping = try? file.mapReadOnly(length: capacity * pageBytes, reserving: reserving) else {
                currentRegion.store(0, ordering: .releasing)
                return
            }
            // Zeroed by the kernel, and backed only where pages are read.
            let words = (mapping.reservedLength / pageBytes + 63) / 64
            let flagBytes = words * MemoryLayout<UInt64>.stride
            let verified = MappedMemory.allocate(flagBytes).bindMemory(to: UnsafeAtomic<UInt64>.Storage.self, capacity: words)
            let region = UnsafeMutablePointer<Region>.allocate(capacity: 1)
            region.initialize(to: Region(base: mapping.base, pages: capacity, verified: verified, ownedFlags: flagBytes))
            regions.append((mapping, Int(bitPattern: region)))
            currentRegion.store(Int(bitPattern: region), ordering: .releasing)
        }
    }

    /// How many mappings of the file were made, and how many regions they had (tests).
    var mappings: (count: Int, regions: Int) {
        regions.withLock { regions in
            (Set(regions.map { ObjectIdentifier($0.mapping) }).count, regions.count)
        }
    }

    /// Where the current mapping puts page 0, or nil when pages are read through the cache (tests).
    var mappingBase: UnsafeRawPointer? {
        let address = currentRegion.load(ordering: .acquiring)
        return address == 0 ? nil : UnsafePointer<Region>(bitPattern: address)!.pointee.base
    }

    /// Whether `pointer` lies in a mapping of the file (tests of reads that borrow).
    func maps(_ pointer: UnsafeRawPointer) -> Bool {
        regions.withLock { regions in
            regions.contains { _, address in
                let region = UnsafePointer<Region>(bitPattern: address)!.pointee
                return pointer >= region.base && pointer < region.base + region.pages * pageBytes
            }
        }
    }

    /// Calls `body` with the verified leaf or branch page `id`, borrowed from the mapping
    /// or the cache. A `PageDefect` thrown by `body` becomes `corruptPage` naming the page.
    @inline(__always)
    func withPage<Result>(_ id: PageID, _ body: (TreePage) throws -> Result) throws -> Result {
        guard !closed.load(ordering: .relaxed) else { throw EngineError.closed }
        let address = currentRegion.load(ordering: .acquiring)
        if address != 0 {
            let page = try mappedPage(id, UnsafePointer<Region>(bitPattern: address)!.pointee)
            if !PageCodec.isCompressedLeaf(page.bytes) {
                do { return try body(page) } catch let defect as PageDefect { throw corrupt(id, defect) }
            }
            let expanded = try expandedLeaf(id, page.bytes)
            do { return try body(expanded.page) } catch let defect as PageDefect { throw corrupt(id, defect) }
        }
        let cached = try cachedPage(id)
        do { return try body(cached.page) } catch let defect as PageDefect { throw corrupt(id, defect) }
    }

    /// Calls `body` with the cell for `key` (a tombstone included), or nil, in the verified
    /// leaf `id`: a point read's last step. A compressed leaf in pieces is searched in the
    /// one piece that would hold `key`, expanded for this call alone (CompressedLeaf.swift);
    /// any other leaf as `withPage` reads it. A `PageDefect` thrown by `body` becomes
    /// `corruptPage` naming the page.
    @inline(__always)
    func withLeafCell<Result>(_ id: PageID, _ key: UnsafeRawBufferPointer, _ body: (LeafCell?) throws -> Result) throws -> Result {
        guard !closed.load(ordering: .relaxed) else { throw EngineError.closed }
        let address = currentRegion.load(ordering: .acquiring)
        if address != 0 {
            let page = try mappedPage(id, UnsafePointer<Region>(bitPattern: address)!.pointee)
            guard page.type == .leaf else { throw corrupt(id, PageDefect("a branch where a leaf belongs")) }
            if !PageCodec.isCompressedLeaf(page.bytes) {
                do { return try body(page.leafCell(for: key)) } catch let defect as PageDefect { throw corrupt(id, defect) }
            }
            if PageCodec.isPiecedLeaf(page.bytes) {
                do {
                    return try PageCodec.withPieceCell(of: page.bytes, pageBytes: pageBytes, for: key, body)
                } catch let defect as PageDefect {
                    throw corrupt(id, defect)
                }
            }
        }
        return try withPage(id) { page in
            guard page.type == .leaf else { throw PageDefect("a branch where a leaf belongs") }
            return try body(page.leafCell(for: key))
        }
    }

    /// The verified leaf or branch page `id`, for a cursor to hold across steps. A page
    /// the cache holds is served from it either way; `caching` false leaves one it does not
    /// hold out of it (a compressed leaf's expansion, or a page copied where the file is
    /// not mapped): the held page alone owns it, and it is freed once no cursor holds it.
    /// For a long walk, whose leaves would push out of the cache the pages point reads
    /// keep coming back to, and which reads each of its leaves once.
    func holdPage(_ id: PageID, caching: Bool = true) throws -> HeldPage {
        guard !closed.load(ordering: .relaxed) else { throw EngineError.closed }
        let address = currentRegion.load(ordering: .acquiring)
        if address != 0 {
            let page = try mappedPage(id, UnsafePointer<Region>(bitPattern: address)!.pointee)
            guard PageCodec.isCompressedLeaf(page.bytes) else { return HeldPage(id: id, page: page, owner: nil) }
            let expanded = try expandedLeaf(id, page.bytes, caching: caching)
            return HeldPage(id: id, page: expanded.page, owner: expanded)
        }
        let cached = try cachedPage(id, caching: caching)
        return HeldPage(id: id, page: cached.page, owner: cached)
    }

    /// Starts loading the first `lines` cache lines of page `id` where it is mapped: its
    /// header and the start of its slots, which a lookup in the page reads first. A hint
    /// for lookups made side by side (`Snapshot.withValues`): it reads nothing, verifies
    /// nothing and never faults; a page outside the mapping or read through the cache is
    /// left alone.
    @inline(__always)
    func prefetch(_ id: PageID, lines: Int) {
        let address = currentRegion.load(ordering: .acquiring)
        guard address != 0 else { return }
        let region = UnsafePointer<Region>(bitPattern: address)!.pointee
        guard id >= .firstDataPage, id.rawValue < UInt64(region.pages) else { return }
        let page = region.base + Int(truncatingIfNeeded: id.rawValue) * pageBytes
        for line in 0..<min(lines, pageBytes / 64) { cplatform_prefetch(page + line * 64) }
    }

    /// Marks the file closed: later tree reads throw `EngineError.closed`.
    func markClosed() { closed.store(true, ordering: .relaxed) }

    /// Whether the store closed the file (a page held from before may not be read).
    var isClosed: Bool { closed.load(ordering: .relaxed) }

    /// The bytes of page `id` in the mapping, verified once as one of `types` (PageFile.P2,
    /// PageFile.P3). A page's bit may have been set by a read of another type, or by the
    /// check of an overflow run starting at it (`mappedRun`): callers check the type byte.
    /// (A run's bytes read as a tree page, or a tree page read as a run, takes a pointer no
    /// checkpoint writes, so a crafted file; its pages are then parsed as any other bytes
    /// are, and `verify`, which reads every page afresh, reports it.)
    @inline(__always)
    private func verifiedMappedBytes(_ id: PageID, _ region: Region, _ types: PageTypes) throws -> UnsafeRawBufferPointer {
        guard id >= .firstDataPage, id.rawValue < UInt64(min(region.pages, filePages.load(ordering: .acquiring))) else {
            throw outside(id)
        }
        let index = Int(truncatingIfNeeded: id.rawValue)
        let bytes = UnsafeRawBufferPointer(start: region.base + index * pageBytes, count: pageBytes)
        let verified = UnsafeAtomic<UInt64>(at: region.verified + index >> 6)
        let bit: UInt64 = 1 << (index & 63)
        if verified.load(ordering: .relaxed) & bit == 0 {
            do { _ = try PageCodec.verify(bytes, id: id, expected: types) } catch { throw corrupt(id, error) }
            _ = verified.loadThenBitwiseOr(with: bit, ordering: .relaxed)
        }
        return bytes
    }

    /// Page `id` in the mapping, verified once (PageFile.P2, PageFile.P3).
    @inline(__always)
    private func mappedPage(_ id: PageID, _ region: Region) throws -> TreePage {
        let bytes = try verifiedMappedBytes(id, region, .tree)
        guard let type = PageType(rawValue: bytes[4]), type == .leaf || type == .branch else {
            throw corrupt(id, PageDefect("it is not a tree page"))
        }
        return TreePage(bytes: bytes, type: type,
                        count: Int(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 6, as: UInt16.self))),
                        word: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self)))
    }

    /// Page `id` from the cache, read and verified (a compressed leaf expanded) on a miss,
    /// and kept there unless `caching` is false.
    /// The page is read straight into the memory the cached page owns (one allocation and
    /// no copy on a miss); a compressed leaf is expanded from it into memory of its own.
    private func cachedPage(_ id: PageID, caching: Bool = true) throws -> CachedPage {
        if let cached = cache.page(id) { return cached }
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: pageBytes, alignment: 16)
        var owned = true
        defer { if owned { bytes.deallocate() } }
        let (type, count, word) = try readPage(id, into: bytes, types: .tree)
        let page = UnsafeRawBufferPointer(bytes)
        let cached: CachedPage
        if PageCodec.isCompressedLeaf(page) {
            cached = CachedPage(owning: try expandInPlace(id, page), type: type, count: count, word: word)
        } else {
            cached = CachedPage(owning: bytes, type: type, count: count, word: word)
            owned = false
        }
        if caching { cache.insert(id, cached) }
        return cached
    }

    /// The expansion of the verified compressed leaf `id` (its page bytes `page`), from the
    /// cache or expanded, into it unless `caching` is false.
    private func expandedLeaf(_ id: PageID, _ page: UnsafeRawBufferPointer, caching: Bool = true) throws -> CachedPage {
        // An expansion keeps its page's header: one of an older write of this page (which
        // PageFile.P1 and the removal on write rule out) is not served but replaced.
        if let cached = cache.page(id),
           cached.page.bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self) == page.loadUnaligned(fromByteOffset: 16, as: UInt64.self) {
            return cached
        }
        let expanded = CachedPage(owning: try expandInPlace(id, page), type: .leaf,
                                  count: Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: 6, as: UInt16.self))), word: 0)
        if caching { cache.insert(id, expanded) }
        return expanded
    }

    /// A verified compressed leaf's expansion; a bad block is `corruptPage` naming the page.
    private func expand(_ id: PageID, _ page: UnsafeRawBufferPointer) throws(EngineError) -> [UInt8] {
        do { return try PageCodec.expandLeaf(page, pageBytes: pageBytes) } catch { throw corrupt(id, error) }
    }

    /// `expand` into memory the caller owns (a `CachedPage`).
    private func expandInPlace(_ id: PageID, _ page: UnsafeRawBufferPointer) throws(EngineError) -> UnsafeMutableRawBufferPointer {
        do { return try PageCodec.expandLeafIntoBuffer(page, pageBytes: pageBytes) } catch { throw corrupt(id, error) }
    }

    /// `corruptPage` for page `id`, or `closed` once the store closed (a reader that raced
    /// the close may have read a page the close cut off: that is not damage).
    func corrupt(_ id: PageID, _ defect: PageDefect) -> EngineError {
        if closed.load(ordering: .relaxed) { return .closed }
        return .corruptPage(path: path, offset: id.offset(pageBytes: pageBytes), reason: defect.description)
    }

    /// The error for a page the file does not hold.
    private func outside(_ id: PageID) -> EngineError {
        if closed.load(ordering: .relaxed) { return .closed }
        let reason = id >= .firstDataPage && id.rawValue < Limits.maxPageCount
            ? "the file ends inside it" : "a pointer names \(id), outside any data file"
        return .corruptPage(path: path, offset: id.offset(pageBytes: pageBytes), reason: reason)
    }

    /// Reads page `id` into `buffer` (`pageBytes` bytes) and verifies it; it must be one
    /// of `types`.
    private func readPage(_ id: PageID, into buffer: UnsafeMutableRawBufferPointer,
                          types: PageTypes) throws -> (type: PageType, count: Int, word: UInt64) {
        guard !closed.load(ordering: .relaxed) else { throw EngineError.closed }
        let offset = id.offset(pageBytes: pageBytes)
        guard id >= .firstDataPage, id.rawValue < Limits.maxPageCount else { throw outside(id) }
        let read: Int
        do { read = try file.read(into: buffer, at: offset) } catch let error as FileIOError { throw EngineError.io(error) }
        guard read == pageBytes else { throw outside(id) }
        do {
            return try PageCodec.verify(UnsafeRawBufferPointer(buffer), id: id, expected: types)
        } catch {
            throw EngineError.corruptPage(path: path, offset: offset, reason: error.description)
        }
    }

    /// Reads and verifies page `id`, which must be one of `types`.
    func readPage(_ id: PageID, types: PageTypes) throws -> (bytes: [UInt8], type: PageType, count: Int, word: UInt64) {
        var header: (type: PageType, count: Int, word: UInt64)?
        let bytes = try [UInt8](unsafeUninitializedCapacity: pageBytes) { buffer, initialized in
            header = try readPage(id, into: UnsafeMutableRawBufferPointer(buffer), types: types)
            initialized = pageBytes
        }
        let (type, count, word) = header!
        return (bytes, type, count, word)
    }

    /// The decoded B+tree page `id`. A branch's first entry has an empty key: callers
    /// substitute the lower bound they know. For the checkpoint, vacuum and verify, which
    /// read most pages of a tree once each: the page is read with `pread` and verified,
    /// not through the mapping, where every page read stayed in the process's resident set
    /// until the mapping went (and verify would trust a page verified earlier).
    func node(_ id: PageID) throws -> Node {
        try nodeAndForm(id).node
    }

    /// `node(id)`, and whether the page is a compressed leaf (for `verify`).
    func nodeAndForm(_ id: PageID) throws -> (node: Node, compressed: Bool) {
        let (bytes, type, count, word, compressed) = try treePage(id)
        do {
            return type == .leaf ? (.leaf(try PageCodec.decodeLeaf(bytes, count: count)), compressed)
                : (.branch(try PageCodec.decodeBranch(bytes, count: count, leftmost: word, lowerBound: [])), false)
        } catch {
            throw corrupt(id, error)
        }
    }

    /// B+tree page `id` as the tree writer takes it: a leaf's cells left in its bytes
    /// (StoredCell.swift), a branch decoded as `node(id)` decodes it.
    func storedNode(_ id: PageID) throws -> StoredNode {
        let (bytes, type, count, word, _) = try treePage(id)
        do {
            return type == .leaf ? .leaf(try PageCodec.storedCells(bytes, count: count))
                : .branch(try PageCodec.decodeBranch(bytes, count: count, leftmost: word, lowerBound: []))
        } catch {
            throw corrupt(id, error)
        }
    }

    /// Tree page `id` read with `pread` and verified, a compressed leaf expanded.
    private func treePage(_ id: PageID) throws -> (bytes: [UInt8], type: PageType, count: Int, word: UInt64, compressed: Bool) {
        var (bytes, type, count, word) = try readPage(id, types: .tree)
        let compressed = type == .leaf && bytes.withUnsafeBytes { PageCodec.isCompressedLeaf($0) }
        if compressed { bytes = try bytes.withUnsafeBytes { page throws(EngineError) in try expand(id, page) } }
        return (bytes, type, count, word, compressed)
    }

    /// Calls `body` with the value stored in overflow pages at `value`. A raw run
    /// (OverflowRun.swift) is borrowed where it lies in the mapping, verified once; a
    /// compressed run is expanded, and a chain (format 4 and before) read, into a new
    /// array. Read with `pread` when `fresh` (`verify`, which trusts no earlier check) or
    /// the file is not mapped.
    func withOverflowValue<Result>(_ value: LargeValue, fresh: Bool = false,
                                   _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result {
        guard !closed.load(ordering: .relaxed) else { throw EngineError.closed }
        guard let run = value.run else {
            return try chainValue(first: value.first, byteCount: value.byteCount, fresh: fresh).withUnsafeBytes(body)
        }
        let address = currentRegion.load(ordering: .acquiring)
        let result: Result
        if !fresh, address != 0 {
            let data = try mappedRun(value, run, UnsafePointer<Region>(bitPattern: address)!.pointee)
            result = value.isCompressed ? try expandRun(value, data).withUnsafeBytes(body) : try body(data)
        } else {
            let pages = try readRun(value, run)
            result = try pages.withUnsafeBytes { pages in
                let data = UnsafeRawBufferPointer(rebasing: pages[..<run.stored])
                return value.isCompressed ? try expandRun(value, data).withUnsafeBytes(body) : try body(data)
            }
        }
        // A close may have turned the mapping into zeros under the read (PageFile.P3).
        guard !closed.load(ordering: .acquiring) else { throw EngineError.closed }
        return result
    }

    /// A copy of the value `withOverflowValue` reads.
    func overflowValue(_ value: LargeValue, fresh: Bool = false) throws -> [UInt8] {
        try withOverflowValue(value, fresh: fresh) { Array($0) }
    }

    /// The stored bytes of `run` in the mapping, its pages verified once against its
    /// cell's checksum (its first page's bit stands for all of them: PageFile.P2, P3).
    private func mappedRun(_ value: LargeValue, _ run: LargeValue.Run, _ region: Region) throws -> UnsafeRawBufferPointer {
        let pages = PageCodec.runPages(storing: run.stored, pageBytes: pageBytes)
        let limit = UInt64(min(region.pages, filePages.load(ordering: .acquiring)))
        guard value.first.rawValue < limit, UInt64(pages) <= limit - value.first.rawValue else { throw runPastTheEnd(value) }
        let index = Int(truncatingIfNeeded: value.first.rawValue)
        let bytes = UnsafeRawBufferPointer(start: region.base + index * pageBytes, count: pages * pageBytes)
        let verified = UnsafeAtomic<UInt64>(at: region.verified + index >> 6)
        let bit: UInt64 = 1 << (index & 63)
        if verified.load(ordering: .relaxed) & bit == 0 {
            do { try PageCodec.verifyRun(bytes, run) } catch { throw corrupt(value.first, error) }
            _ = verified.loadThenBitwiseOr(with: bit, ordering: .relaxed)
        }
        return UnsafeRawBufferPointer(rebasing: bytes[..<run.stored])
    }

    /// The pages of `run`, read with `pread` and verified against its cell's checksum.
    private func readRun(_ value: LargeValue, _ run: LargeValue.Run) throws -> [UInt8] {
        let count = PageCodec.runPages(storing: run.stored, pageBytes: pageBytes) * pageBytes
        let pages: [UInt8]
        do { pages = try file.read(count: count, at: value.first.offset(pageBytes: pageBytes)) } catch let error as FileIOError {
            throw EngineError.io(error)
        }
        guard pages.count == count else { throw runPastTheEnd(value) }
        do { try pages.withUnsafeBytes { try PageCodec.verifyRun($0, run) } } catch let defect as PageDefect {
            throw corrupt(value.first, defect)
        }
        return pages
    }

    /// The error for a run that reaches past the end of the file.
    private func runPastTheEnd(_ value: LargeValue) -> EngineError {
        corruptOrClosed(offset: value.first.offset(pageBytes: pageBytes),
                        "its overflow run of \(value.runPages(pageBytes: pageBytes) ?? 0) pages runs past the end of the file")
    }

    /// A compressed run's LZ4 block `data` expanded to its value's bytes.
    private func expandRun(_ value: LargeValue, _ data: UnsafeRawBufferPointer) throws -> [UInt8] {
        do { return try LZ4Block.decompress(data, decompressedCount: value.byteCount) } catch {
            throw corruptOrClosed(offset: value.first.offset(pageBytes: pageBytes),
                                  "its overflow run's LZ4 block does not expand to its \(value.byteCount) bytes")
        }
    }

    /// Reads a value stored in the overflow chain at `first` (format 4 and before). Bounded
    /// by `byteCount`: a raw chain is read until it holds that many bytes; a compressed one
    /// (its first page marked, FORMAT.md "Overflow pages") to its end, in at most as many
    /// pages as the raw value would take, and its block must expand to exactly `byteCount`
    /// bytes. Pages are read through the mapping where there is one (each verified once, as
    /// tree pages are), or with `pread` when `fresh` or unmapped.
    private func chainValue(first: PageID, byteCount: Int, fresh: Bool) throws -> [UInt8] {
        var value: [UInt8] = []
        value.reserveCapacity(byteCount)
        var next = first
        var compressed = false
        var pages = 0
        let perPage = PageCodec.overflowCapacity(pageBytes: pageBytes)
        let mostPages = (byteCount + perPage - 1) / perPage
        while compressed || value.count < byteCount {
            guard next != .none else {
                if compressed { break }
                throw corruptOrClosed(offset: 0, "an overflow chain ends after \(value.count) of \(byteCount) bytes")
            }
            let id = next
            let offset = id.offset(pageBytes: pageBytes)
            pages += 1
            let defect: String? = try withOverflowPage(id, fresh: fresh) { page in
                let marked = page[PageCodec.leafFormatOffset] == PageCodec.compressedChain
                if pages == 1 { compressed = marked }
                guard marked == (compressed && pages == 1), pages <= mostPages else {
                    return marked ? "a page past an overflow chain's first is marked compressed"
                        : "an overflow chain runs past the \(mostPages) pages its \(byteCount) bytes take"
                }
                let count = Int(UInt32(littleEndian: page.loadUnaligned(fromByteOffset: 32, as: UInt32.self)))
                guard count > 0, count <= perPage else { return "it declares \(count) data bytes" }
                guard value.count + count <= byteCount else { return "an overflow chain holds more than its \(byteCount) bytes" }
                value.append(contentsOf: UnsafeRawBufferPointer(rebasing: page[36..<(36 + count)]))
                next = PageID(UInt64(littleEndian: page.loadUnaligned(fromByteOffset: 24, as: UInt64.self)))
                return nil
            }
            if let defect { throw corruptOrClosed(offset: offset, defect) }
        }
        // A close may have turned the mapping into zeros under the copy (PageFile.P3).
        guard !closed.load(ordering: .acquiring) else { throw EngineError.closed }
        guard compressed else { return value }
        guard value.count < byteCount else {
            throw corruptOrClosed(offset: first.offset(pageBytes: pageBytes), "a compressed overflow chain is no shorter than its value")
        }
        do { return try LZ4Block.decompress(value, decompressedCount: byteCount) } catch {
            throw corruptOrClosed(offset: first.offset(pageBytes: pageBytes),
                                  "its overflow chain's LZ4 block does not expand to its \(byteCount) bytes")
        }
    }

    /// `corruptPage` at `offset`, or `closed` once the store closed (see `corrupt`).
    private func corruptOrClosed(offset: Int64, _ reason: String) -> EngineError {
        closed.load(ordering: .acquiring) ? .closed : .corruptPage(path: path, offset: offset, reason: reason)
    }

    /// Calls `body` with the verified overflow page `id`: borrowed from the mapping (checked
    /// once, PageFile.P2 and P3), or read with `pread` when `fresh` or the file is not mapped.
    private func withOverflowPage<Result>(_ id: PageID, fresh: Bool, _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result {
        guard !closed.load(ordering: .relaxed) else { throw EngineError.closed }
        let address = currentRegion.load(ordering: .acquiring)
        guard !fresh, address != 0 else {
            return try readPage(id, types: [.overflow]).bytes.withUnsafeBytes { try body($0) }
        }
        let bytes = try verifiedMappedBytes(id, UnsafePointer<Region>(bitPattern: address)!.pointee, [.overflow])
        // A bit another read set may be a tree page's.
        guard bytes[4] == PageType.overflow.rawValue else { throw corrupt(id, PageDefect("it is not an overflow page")) }
        return try body(bytes)
    }

    /// The IDs of the pages holding an overflow value (to free them). A run's are known
    /// from its cell, and must lie in the file and below `pageCount` (the tree's page
    /// count, when the caller knows it); a chain's pages are read one by one.
    func overflowPages(_ value: LargeValue, below pageCount: UInt64 = .max) throws -> [PageID] {
        if let pages = value.runPages(pageBytes: pageBytes) {
            let limit = min(UInt64(filePages.load(ordering: .acquiring)), pageCount)
            guard value.first.rawValue < limit, UInt64(pages) <= limit - value.first.rawValue else { throw runPastTheEnd(value) }
            return (0..<UInt64(pages)).map { PageID(value.first.rawValue + $0) }
        }
        let (first, byteCount) = (value.first, value.byteCount)
        let perPage = PageCodec.overflowCapacity(pageBytes: pageBytes)
        let mostPages = (byteCount + perPage - 1) / perPage
        var pages: [PageID] = []
        var next = first
        var compressed = false
        for _ in 0..<mostPages where next != .none {
            let (bytes, _, _, word) = try readPage(next, types: [.overflow])
            if pages.isEmpty { compressed = bytes[PageCodec.leafFormatOffset] == PageCodec.compressedChain }
            pages.append(next)
            next = PageID(word)
        }
        // A compressed chain is read to its end: one that does not end within the pages
        // its value could take, or names a page twice, must not free what it points at.
        if compressed && (next != .none || Set(pages).count != pages.count) {
            throw corruptOrClosed(offset: first.offset(pageBytes: pageBytes),
                                  "a compressed overflow chain does not end within \(mostPages) distinct pages")
        }
        return pages
    }

    func write(_ page: [UInt8], at id: PageID) throws {
        precondition(page.count == pageBytes, "writing a malformed page")
        try page.withUnsafeBytes { try write(pages: $0, from: id) }
    }

    /// Writes whole pages at consecutive IDs from `first` with one write.
    func write(pages: UnsafeRawBufferPointer, from first: PageID) throws {
        precondition(pages.count > 0 && pages.count % pageBytes == 0 && first >= .firstDataPage, "writing malformed pages")
        let count = pages.count / pageBytes
        let start = Int(truncatingIfNeeded: first.rawValue)
        let address = currentRegion.load(ordering: .acquiring)
        for index in start..<start + count {
            cache.remove(PageID(UInt64(index)))
            if address != 0 {
                // Reverified at its next read (the page is free, so no reader is on it: PageFile.P1).
                let region = UnsafePointer<Region>(bitPattern: address)!.pointee
                if index < region.pages {
                    _ = UnsafeAtomic<UInt64>(at: region.verified + index >> 6).loadThenBitwiseAnd(with: ~(1 << (index & 63)), ordering: .relaxed)
                }
            }
        }
        do { try file.write(pages, at: first.offset(pageBytes: pageBytes)) } catch let error as FileIOError { throw EngineError.io(error) }
        noteWritten(pages.count)
        let end = start + count
        if end > filePages.load(ordering: .relaxed) {
            if address != 0, end > UnsafePointer<Region>(bitPattern: address)!.pointee.pages { mapCovering(end) }
            filePages.store(end, ordering: .releasing)
        }
    }

    /// For a reader beside a writer in another process, when it moves to a newer tree:
    /// forgets every page it verified or cached (the writer may since have rewritten pages
    /// that no tree this reader still reads reaches: PageFile.P1 holds only for the trees
    /// it pins), and learns how far the file now reaches (PageFile.P3).
    func followWriter() throws(EngineError) {
        cache.removeAll()
        regions.withLock { regions in
            // The last region of each mapping covers what its earlier ones did.
            for (position, (mapping, address)) in regions.enumerated()
            where position + 1 == regions.count || regions[position + 1].mapping !== mapping {
                let region = UnsafePointer<Region>(bitPattern: address)!.pointee
                for word in 0..<(region.pages + 63) / 64 {
                    // (A word never set stays untouched memory.)
                    let bits = UnsafeAtomic<UInt64>(at: region.verified + word)
                    if bits.load(ordering: .relaxed) != 0 { bits.store(0, ordering: .relaxed) }
                }
            }
        }
        let size: Int64
        do { size = try file.size() } catch { throw EngineError.io(error as? FileIOError ?? .closed(operation: .size, path: path)) }
        let pages = Int(size / Int64(pageBytes))
        guard pages > filePages.load(ordering: .relaxed) else { return }
        let address = currentRegion.load(ordering: .acquiring)
        if address != 0, pages > UnsafePointer<Region>(bitPattern: address)!.pointee.pages { mapCovering(pages) }
        filePages.store(pages, ordering: .releasing)
    }

    /// Takes `pages` (freed by a checkpoint) out of the process's resident set: the
    /// mappings' page tables let them go, each run of consecutive pages with one call,
    /// and the kernel keeps their bytes in its page cache. A checkpoint reads through the
    /// mapping every page it rewrites, so without this each page it freed stayed resident
    /// until the file was closed (during records-range at 1M people, 437 MB of the file
    /// was mapped, more than the 411 MB file then held). A snapshot of an
    /// older tree that still reads one faults it in again with the same bytes: a freed
    /// page is not written while a snapshot can reach it (PageFile.P1). Pages stay
    /// verified.
    func releaseMapped(_ pages: [PageID]) {
        guard !pages.isEmpty else { return }
        let mappings = regions.withLock { regions in
            var seen = Set<ObjectIdentifier>()
            return regions.map(\.mapping).filter { seen.insert(ObjectIdentifier($0)).inserted }
        }
        guard !mappings.isEmpty else { return }
        let sorted = pages.map(\.rawValue).sorted()
        var runStart = sorted[0], runEnd = sorted[0] + 1
        func release() {
            let offset = Int(runStart) * pageBytes, length = Int(runEnd - runStart) * pageBytes
            for mapping in mappings { mapping.release(offset: offset, length: length) }
        }
        for page in sorted.dropFirst() where page >= runEnd {
            if page == runEnd {
                runEnd += 1
            } else {
                release()
                (runStart, runEnd) = (page, page + 1)
            }
        }
        release()
    }

    /// Stops every read of the file: marks it closed and turns the mappings' pages into
    /// zeros, for a read-only store's close (once it gives its slot up, a writer's close
    /// may cut the file under a read that was already past the closed check).
    func discardMappings() {
        markClosed()
        currentRegion.store(0, ordering: .releasing)
        regions.withLock { regions in
            for (mapping, _) in regions { mapping.discard() }
        }
    }

    /// Cuts the file down to `pages` pages (a vacuuming close, its last page read done).
    /// Reads stop first: the file is marked closed, and the mappings' pages become zeros
    /// (PageFile.P3) for a reader already past that check.
    func cut(toPages pages: Int) throws {
        markClosed()
        currentRegion.store(0, ordering: .releasing)
        filePages.store(min(pages, filePages.load(ordering: .relaxed)), ordering: .releasing)
        regions.withLock { regions in
            for (mapping, _) in regions { mapping.discard() }
        }
        do { try file.truncate(to: Int64(pages) * Int64(pageBytes)) } catch let error as FileIOError { throw EngineError.io(error) }
    }

    /// Writes the free list: `listed` spread over `listPages` in order, each chained to the
    /// next (a checkpoint's and a vacuuming close's).
    func writeFreeList(_ listed: [PageID], in listPages: [PageID], generation: UInt64) throws {
        let perPage = PageCodec.freeListCapacity(pageBytes: pageBytes)
        for (index, page) in listPages.enumerated() {
            let chunk = listed[min(listed.count, index * perPage)..<min(listed.count, (index + 1) * perPage)]
            let next = index + 1 < listPages.count ? listPages[index + 1] : .none
            try write(PageCodec.encodeFreeList(chunk, next: next, id: page, generation: generation, pageBytes: pageBytes), at: page)
        }
    }

    func writeMeta(_ meta: MetaPage) throws {
        do { try file.write(meta.encoded(), at: Int64(meta.generation % 2) * Int64(pageBytes)) } catch let error as FileIOError {
            throw EngineError.io(error)
        }
    }

    func syncData() throws {
        do { try file.syncData() } catch let error as FileIOError { throw EngineError.io(error) }
        unflushedBytes.store(0, ordering: .relaxed)
    }

    /// Starts the device writing pages every `writebackBytes` written (writers: one
    /// checkpoint or close at a time). A checkpoint writes tens of megabytes; left to its
    /// final fdatasync, that flush takes a few hundred milliseconds on this machine's disk,
    /// and every commit's log fdatasync in the meantime waits behind it (measured: commit
    /// latencies of 130-320 ms at each checkpoint). Started as it goes, the writeback runs
    /// alongside and the final sync has little left.
    private func noteWritten(_ bytes: Int) {
        let total = unflushedBytes.load(ordering: .relaxed) + bytes
        if total >= Self.writebackBytes {
            file.startWriteback()
            unflushedBytes.store(0, ordering: .relaxed)
        } else {
            unflushedBytes.store(total, ordering: .relaxed)
        }
    }
}
