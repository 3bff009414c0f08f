// The data file: reading verified pages (through the page cache), writing pages during a
// checkpoint, and the two meta pages (FORMAT.md, "Page file").
//
// Invariants:
//  P1. A page is written only while it is free in the durable meta page and no snapshot
//      can reach it (the checkpoint's allocator guarantees it), so readers never see a
//      page change under them.
//  P2. Every page read from disk is verified before use; a bad page is
//      `EngineError.corruptPage` with the file and offset, never a trap.
// Thread-safety: reads from any thread; writes only from the one running checkpoint.
import StrataFileIO

final class PageFile: Sendable {
    let path: String
    let file: any OpenFile
    let pageBytes: Int
    let cache: PageCache

    init(path: String, file: any OpenFile, pageBytes: Int, cachePages: Int) {
        self.path = path
        self.file = file
        self.pageBytes = pageBytes
        self.cache = PageCache(capacity: cachePages)
    }

    /// Reads and verifies page `id`, which must be one of `types`.
    func readPage(_ id: PageID, types: Set<PageType>) throws -> (bytes: [UInt8], type: PageType, count: Int, word: UInt64) {
        let offset = id.offset(pageBytes: pageBytes)
        guard id >= .firstDataPage, id.rawValue < Limits.maxPageCount else {
            throw EngineError.corruptPage(path: path, offset: offset, reason: "a pointer names \(id), outside any data file")
        }
        let bytes: [UInt8]
        do { bytes = try file.read(count: pageBytes, at: offset) } catch let error as FileIOError { throw EngineError.io(error) }
        guard bytes.count == pageBytes else {
            throw EngineError.corruptPage(path: path, offset: offset, reason: "the file ends inside it")
        }
        do {
            let (type, count, word) = try PageCodec.verify(bytes, id: id, expected: types)
            return (bytes, type, count, word)
        } catch {
            throw EngineError.corruptPage(path: path, offset: offset, reason: error.description)
        }
    }

    /// The verified B+tree page `id`, from the cache when it is there.
    func page(_ id: PageID) throws -> PageView {
        if let page = cache.page(id) { return page }
        let (bytes, type, count, word) = try readPage(id, types: [.leaf, .branch])
        let page = PageView(bytes: bytes, type: type, count: count, word: word)
        cache.insert(id, page)
        return page
    }

    /// The decoded B+tree page `id`. A branch's first entry has an empty key: callers
    /// substitute the lower bound they know.
    func node(_ id: PageID) throws -> Node {
        let page = try page(id)
        do {
            return page.type == .leaf ? .leaf(try PageCodec.decodeLeaf(page.bytes, count: page.count))
                : .branch(try PageCodec.decodeBranch(page.bytes, count: page.count, leftmost: page.word, lowerBound: []))
        } catch {
            throw EngineError.corruptPage(path: path, offset: id.offset(pageBytes: pageBytes), reason: error.description)
        }
    }

    /// Reads a value stored in the overflow chain at `first`. Bounded by `byteCount`.
    func overflowValue(first: PageID, byteCount: Int) throws -> [UInt8] {
        var value: [UInt8] = []
        value.reserveCapacity(byteCount)
        var next = first
        while value.count < byteCount {
            guard next != .none else {
                throw EngineError.corruptPage(path: path, offset: 0, reason: "an overflow chain ends after \(value.count) of \(byteCount) bytes")
            }
            let (bytes, _, _, word) = try readPage(next, types: [.overflow])
            do { value += try PageCodec.decodeOverflow(bytes) } catch {
                throw EngineError.corruptPage(path: path, offset: next.offset(pageBytes: pageBytes), reason: error.description)
            }
            guard value.count <= byteCount else {
                throw EngineError.corruptPage(path: path, offset: next.offset(pageBytes: pageBytes),
                                              reason: "an overflow chain holds more than its \(byteCount) bytes")
            }
            next = PageID(word)
        }
        return value
    }

    /// The IDs of the pages of an overflow chain (to free them).
    func overflowPages(first: PageID, byteCount: Int) throws -> [PageID] {
        let perPage = PageCodec.overflowCapacity(pageBytes: pageBytes)
        var pages: [PageID] = []
        var next = first
        for _ in 0..<((byteCount + perPage - 1) / perPage) where next != .none {
            pages.append(next)
            next = PageID(try readPage(next, types: [.overflow]).word)
        }
        return pages
    }

    func write(_ page: [UInt8], at id: PageID) throws {
        precondition(page.count == pageBytes && id >= .firstDataPage, "writing a malformed page")
        cache.remove(id)
        do { try file.write(page, at: id.offset(pageBytes: pageBytes)) } catch let error as FileIOError { throw EngineError.io(error) }
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
    }
}
