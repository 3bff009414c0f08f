import StrataFileIO
import Testing
@testable import StrataEngine

/// The page cache (PageCache.swift): a CLOCK over fixed slots, found through an
/// open-addressing index. A lookup must answer the page last inserted under its ID or
/// nothing, whatever evictions and removals moved the index's entries; the bytes held stay
/// within the budget; a page referenced since the hand last passed outlives one that was not.
@Suite struct PageCacheTests {
    private static let pageBytes = 4096

    /// A leaf page of `bytes` bytes whose first word says which insert made it.
    private func page(_ tag: UInt64, bytes: Int = pageBytes) -> CachedPage {
        var raw = [UInt8](repeating: 0, count: bytes)
        withUnsafeBytes(of: tag.littleEndian) { raw.replaceSubrange(0..<8, with: $0) }
        return CachedPage(raw, type: .leaf, count: 0, word: 0)
    }

    private func tag(_ page: CachedPage) -> UInt64 {
        page.page.bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)
    }

    @Test func randomInsertsRemovalsAndLookupsAnswerTheLatestPageOrNothing() {
        var random = SplitMix64(seed: 0xCA_C4E1)
        print("PageCacheTests seed 0xCA_C4E1")
        let cache = PageCache(capacityBytes: 24 * Self.pageBytes, pageBytes: Self.pageBytes)
        /// The tag of the page last inserted under each ID, nil once removed.
        var latest: [UInt64: UInt64] = [:]
        var found = 0
        for step in 0..<60_000 {
            // IDs from a small range collide in the index and recur often; some are
            // multiples of the index's size, which hash alike in their low bits.
            let id = Bool.random(using: &random) ? UInt64.random(in: 2...80, using: &random)
                : 64 * UInt64.random(in: 1...12, using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                // Mostly whole pages, some expansions of up to four.
                let bytes = Int.random(in: 0..<8, using: &random) == 0 ? Self.pageBytes * Int.random(in: 2...4, using: &random) : Self.pageBytes
                cache.insert(PageID(id), page(UInt64(step), bytes: bytes))
                latest[id] = UInt64(step)
            case 4:
                cache.remove(PageID(id))
                latest[id] = nil
            default:
                if let cached = cache.page(PageID(id)) {
                    #expect(tag(cached) == latest[id], "page \(id) at step \(step)")
                    found += 1
                }
            }
            #expect(cache.byteCount <= cache.capacityBytes)
            #expect(cache.count <= 24)
        }
        // Every page still held is found: none is lost to a broken probe run.
        var held = 0
        for (id, tag) in latest where cache.page(PageID(id)).map(self.tag) == tag { held += 1 }
        #expect(held == cache.count)
        #expect(found > 10_000, "lookups found \(found) pages")
    }

    @Test func aPageReferencedSinceTheHandPassedOutlivesTheOthers() {
        let cache = PageCache(capacityBytes: 16 * Self.pageBytes, pageBytes: Self.pageBytes)
        for id in 2..<18 { cache.insert(PageID(UInt64(id)), page(UInt64(id))) }
        #expect(cache.count == 16)
        #expect(cache.page(PageID(2)) != nil)
        cache.insert(PageID(18), page(18))
        #expect(cache.count == 16)
        #expect(cache.page(PageID(2)).map(tag) == 2, "the referenced page was evicted")
        #expect(cache.page(PageID(18)).map(tag) == 18)
        #expect(cache.page(PageID(3)) == nil, "the hand evicts the first unreferenced page it meets")
    }

    @Test func largePagesEvictByBytesAndAPageBeyondTheBudgetIsNotKept() {
        let cache = PageCache(capacityBytes: 16 * Self.pageBytes, pageBytes: Self.pageBytes)
        for id in 2..<10 { cache.insert(PageID(UInt64(id)), page(UInt64(id), bytes: 4 * Self.pageBytes)) }
        #expect(cache.count == 4)
        #expect(cache.byteCount == 16 * Self.pageBytes)
        cache.insert(PageID(40), page(40, bytes: 17 * Self.pageBytes))
        #expect(cache.page(PageID(40)) == nil)
        #expect(cache.count == 4)
        cache.removeAll()
        #expect(cache.count == 0 && cache.byteCount == 0)
        cache.insert(PageID(41), page(41))
        #expect(cache.page(PageID(41)).map(tag) == 41)
    }
}
