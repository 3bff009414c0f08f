// A bounded cache of verified B+tree pages (raw bytes, searched in place): the pages of a
// data file that is not mapped (the simulated file system maps nothing, and
// `EngineOptions.mapsDataFile` may turn the mapping off; PageFile.swift says why a
// mapping is preferred where there is one), and the expansions of compressed leaves
// (CompressedLeaf.swift) wherever the file lies, as reads take them: a long walk holds
// its leaves past a quarter of the cache beside it (TreeCursor, PageFile.holdPage).
//
// A fixed array of slots, found through an open-addressing index (linear probing, a
// multiplicative hash of the page ID, twice as many positions as slots), evicted by CLOCK:
// a hit sets its slot's reference bit, and the hand sweeps the slots, clearing set bits and
// evicting the first slot whose bit is clear. A hit costs one multiply and a probe or two,
// and neither allocates nor moves an entry: the two-generation maps this replaced hashed
// every lookup with SipHash, twice when the page was not in the newer map, and moved each
// page found in the older one (in a records-range query on a store read through the cache,
// 11.6 % of the query's time went to the cache's lookups).
//
// Invariants:
//  PageCache.C1. `index` names every occupied slot exactly once, at or after (cyclically,
//      with no empty position between) the position its ID hashes to; it names no free slot.
//  PageCache.C2. `bytes` is the sum of the occupied slots' page sizes, at most
//      `capacityBytes` after every insert (a single page larger than that is not kept).
// Thread-safety: every method takes the mutex; cached pages are immutable.
import StrataLocks
import Synchronization

final class PageCache: Sendable {
    private struct Slots {
        /// The page in each slot, nil for a free slot.
        var pages: [CachedPage?]
        /// The ID of each occupied slot's page.
        var ids: [PageID]
        /// Each slot's CLOCK reference bit: set by a hit, cleared by the hand passing.
        var referenced: [Bool]
        /// Open-addressing positions: a slot's number plus one, or 0 for an empty position.
        var index: [Int32]
        /// Free slots, taken from the end.
        var free: [Int32]
        /// The slot the CLOCK hand looks at next.
        var hand = 0
        /// Bytes of the cached pages.
        var bytes = 0

        /// No slot yet: the arrays are made by the first insert (a mapped store's cache,
        /// which holds only compressed leaves' expansions, may never take a page).
        init() {
            pages = []
            ids = []
            referenced = []
            index = []
            free = []
        }

        init(slotCount: Int, positions: Int) {
            pages = Array(repeating: nil, count: slotCount)
            ids = Array(repeating: .none, count: slotCount)
            referenced = Array(repeating: false, count: slotCount)
            index = Array(repeating: 0, count: positions)
            free = (0..<Int32(slotCount)).reversed()
        }
    }

    /// The most bytes of pages held at once.
    let capacityBytes: Int
    private let slotCount: Int
    /// The index's positions are `positionBits` bits wide.
    private let positionBits: Int
    private let maps: Locked<Slots>

    /// A cache of at least 16 pages of `pageBytes`.
    init(capacityBytes: Int, pageBytes: Int) {
        self.capacityBytes = max(capacityBytes, 16 * pageBytes)
        slotCount = self.capacityBytes / pageBytes
        var positions = 1
        while positions < 2 * slotCount { positions <<= 1 }
        positionBits = positions.trailingZeroBitCount
        maps = Locked(Slots())
    }

    func page(_ id: PageID) -> CachedPage? {
        maps.withLock { slots in
            guard let (_, slot) = find(id, in: slots) else { return nil }
            slots.referenced[slot] = true
            return slots.pages[slot]
        }
    }

    func insert(_ id: PageID, _ page: CachedPage) {
        let size = page.page.bytes.count
        guard size <= capacityBytes else { return }
        maps.withLock { slots in
            if slots.index.isEmpty { slots = Slots(slotCount: slotCount, positions: 1 << positionBits) }
            if let (_, slot) = find(id, in: slots) {
                slots.bytes += size - slots.pages[slot]!.page.bytes.count
                slots.pages[slot] = page
                slots.referenced[slot] = true
            } else {
                while slots.free.isEmpty || slots.bytes + size > capacityBytes { evictOne(&slots) }
                let slot = Int(slots.free.removeLast())
                slots.pages[slot] = page
                slots.ids[slot] = id
                slots.referenced[slot] = false
                slots.bytes += size
                var position = home(id)
                while slots.index[position] != 0 { position = (position + 1) & (slots.index.count - 1) }
                slots.index[position] = Int32(slot + 1)
            }
            while slots.bytes > capacityBytes { evictOne(&slots) }
        }
    }

    /// Forgets a page that is about to be rewritten.
    func remove(_ id: PageID) {
        maps.withLock { slots in
            if let (position, slot) = find(id, in: slots) { vacate(slot, at: position, &slots) }
        }
    }

    /// Forgets every page.
    func removeAll() {
        maps.withLock { $0 = Slots() }
    }

    var count: Int { maps.withLock { $0.pages.count - $0.free.count } }

    /// Bytes of the cached pages.
    var byteCount: Int { maps.withLock { $0.bytes } }

    /// The index position `id` hashes to (Fibonacci hashing: the high bits of a multiply).
    private func home(_ id: PageID) -> Int {
        Int(truncatingIfNeeded: (id.rawValue &* 0x9E37_79B9_7F4A_7C15) >> UInt64(64 - positionBits))
    }

    /// The index position and slot of `id`'s page, if cached.
    private func find(_ id: PageID, in slots: Slots) -> (position: Int, slot: Int)? {
        guard !slots.index.isEmpty else { return nil }
        let mask = slots.index.count - 1
        var position = home(id)
        while true {
            let entry = Int(slots.index[position])
            if entry == 0 { return nil }
            if slots.ids[entry - 1] == id { return (position, entry - 1) }
            position = (position + 1) & mask
        }
    }

    /// Evicts the first slot the hand finds unreferenced, clearing the bits it passes.
    private func evictOne(_ slots: inout Slots) {
        while true {
            let slot = slots.hand
            slots.hand = slot + 1 == slotCount ? 0 : slot + 1
            guard slots.pages[slot] != nil else { continue }
            if slots.referenced[slot] {
                slots.referenced[slot] = false
                continue
            }
            vacate(slot, at: find(slots.ids[slot], in: slots)!.position, &slots)
            return
        }
    }

    /// Frees `slot`, named at index `position`, and closes the gap its position leaves
    /// (backward-shift deletion: every entry after it in its run that may move back does).
    private func vacate(_ slot: Int, at position: Int, _ slots: inout Slots) {
        slots.bytes -= slots.pages[slot]!.page.bytes.count
        slots.pages[slot] = nil
        slots.ids[slot] = .none
        slots.referenced[slot] = false
        slots.free.append(Int32(slot))
        let mask = slots.index.count - 1
        var gap = position
        var next = (gap + 1) & mask
        while slots.index[next] != 0 {
            let wanted = home(slots.ids[Int(slots.index[next]) - 1])
            // The entry at `next` may fill the gap unless its home lies cyclically in (gap, next].
            if (next - wanted) & mask >= (next - gap) & mask {
                slots.index[gap] = slots.index[next]
                gap = next
            }
            next = (next + 1) & mask
        }
        slots.index[gap] = 0
    }
}
