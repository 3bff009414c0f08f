// A hash index over the memtable's keys: for each key, its newest node. A point lookup
// costs a hash and one or two memory accesses instead of a skip-list search (about 20
// dependent cache misses in a full memtable); a key the memtable lacks is answered by an
// empty slot. The skip list stays the order for scans and checkpoints.
//
// Open addressing with linear probing; a slot holds a node's address in its low 48 bits
// and 16 bits of the key's hash above them, so probing past other keys rarely touches
// their nodes. Sized once from the memtable's byte budget (a slot per 64 bytes of budget),
// it is never rehashed: past three quarters full it stops taking keys and says so
// (`isComplete` false), and from then on lookups go through the skip list.
//
// Invariants:
//  MemtableIndex.X1. While `isComplete`, every key in the memtable has a slot, and it names the key's
//      newest node (older versions follow it at level 0).
//  MemtableIndex.X2. A slot is written only after the node it names is linked into the skip list,
//      or, in a memtable that defers linking, after the node's level-0 link names its key's
//      older change (Memtable.D1).
// Thread-safety: written by the memtable's single writer; slots are loaded with acquire
// (a node's bytes are visible before its slot), `isComplete` relaxed (publication of a
// version through the engine's SnapshotRegistry orders it before the reads of that version).
import Atomics
import CStrataPlatform
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct MemtableIndex {
    private let slots: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>
    private let mask: Int
    private let limit: Int
    /// Slots taken (writer only), behind a pointer so that `record` need not be mutating:
    /// the memtable keeps its index in a `let`, read by every lookup without an access check.
    private let used: UnsafeMutablePointer<Int>
    /// On a cache line of its own, not in a `ManagedAtomic`: every lookup of a key the
    /// filter passes reads it (reading an atomic object retained and released it), and
    /// `used` beside it would be written by every insert.
    private let completeFlag: UnsafeMutablePointer<UnsafeAtomic<Bool>.Storage>
    private var complete: UnsafeAtomic<Bool> { UnsafeAtomic(at: completeFlag) }
    /// Beside it on that line, written once: whether `used` reached `nearlyFullMark`.
    private var nearlyFull: UnsafeAtomic<Bool> { UnsafeAtomic(at: completeFlag + 1) }
    /// Slots taken at which the index is nearly full: a sixteenth of its slots before `limit`,
    /// room for the batches committed between the checkpoint's start and its freeze.
    private let nearlyFullMark: Int

    static let smallestSlots = 64
    static let largestSlots = 1 << 22
    private static let addressBits = 48
    private static let addressMask = (1 << addressBits) - 1

    /// An index for a memtable of about `budgetBytes`; free it with `deallocate()`.
    /// `populated`: backed with memory at once (see `Memtable.init`).
    init(budgetBytes: Int, populated: Bool = false) {
        var count = Self.smallestSlots
        while count < min(budgetBytes / 64, Self.largestSlots) { count *= 2 }
        // Zeroed pages from the kernel: unless populated, they cost no RAM until keys land
        // on them, and they go back to it with the memtable (MappedMemory).
        slots = MappedMemory.allocate(count * MemoryLayout<Int>.stride, populated: populated)
            .bindMemory(to: UnsafeAtomic<Int>.Storage.self, capacity: count)
        mask = count - 1
        limit = count / 4 * 3
        nearlyFullMark = limit - count / 16
        used = .allocate(capacity: 1)
        used.initialize(to: 0)
        completeFlag = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
            .initializeMemory(as: UnsafeAtomic<Bool>.Storage.self, repeating: .init(true), count: 1)
        (completeFlag + 1).initialize(to: .init(false))
    }

    func deallocate() {
        MappedMemory.deallocate(slots, byteCount: slotCount * MemoryLayout<Int>.stride)
        used.deallocate()
        UnsafeMutableRawPointer(completeFlag).deallocate()
    }

    /// The number of slots (the filter beside it takes one word per eight).
    var slotCount: Int { mask + 1 }

    /// Whether every key of the memtable is in the index (MemtableIndex.X1).
    var isComplete: Bool { complete.load(ordering: .relaxed) }

    /// Whether the index took 11/16 of its slots: its memtable is due for a checkpoint
    /// while the index still names every key. Any thread may ask.
    var isNearlyFull: Bool { nearlyFull.load(ordering: .relaxed) }

    /// The newest node of `key` (whose `hashKey` is `hash`), or nil when the index has none.
    func newest(_ key: UnsafeRawBufferPointer, hash: UInt64) -> MemtableNode? {
        let tag = Int(truncatingIfNeeded: hash >> 48)
        var index = Int(truncatingIfNeeded: hash) & mask
        while true {
            let slot = UnsafeAtomic<Int>(at: slots + index).load(ordering: .acquiring)
            if slot == 0 { return nil }
            if slot >> Self.addressBits & 0xFFFF == tag {
                let node = MemtableNode(UnsafeMutableRawPointer(bitPattern: slot & Self.addressMask)!)
                if node.compare(with: key) == 0 { return node }
            }
            index = (index + 1) & mask
        }
    }

    /// Whether the index can name `count` more keys and stay complete (writer only).
    func hasRoom(for count: Int) -> Bool { isComplete && used.pointee + count <= limit }

    /// Whether a slot can hold `node`'s address.
    static func canName(_ node: MemtableNode) -> Bool { node.bits & ~addressMask == 0 }

    /// Starts loading the slot where a key with this hash is probed first (a hint).
    @inline(__always)
    func prefetch(_ hash: UInt64) {
        if isComplete { cplatform_prefetch(slots + (Int(truncatingIfNeeded: hash) & mask)) }
    }

    /// Makes `node` the newest of its key (writer only, after linking it: MemtableIndex.X2).
    func record(_ node: MemtableNode, hash: UInt64) {
        guard isComplete else { return }
        let key = node.key
        let tag = Int(truncatingIfNeeded: hash >> 48)
        guard node.bits & ~Self.addressMask == 0 else {
            complete.store(false, ordering: .relaxed)
            return
        }
        let tagged = tag << Self.addressBits | node.bits
        var index = Int(truncatingIfNeeded: hash) & mask
        while true {
            let atomic = UnsafeAtomic<Int>(at: slots + index)
            let slot = atomic.load(ordering: .relaxed)
            if slot == 0 {
                guard used.pointee < limit else {
                    complete.store(false, ordering: .relaxed)
                    return
                }
                used.pointee += 1
                if used.pointee == nearlyFullMark { nearlyFull.store(true, ordering: .relaxed) }
                atomic.store(tagged, ordering: .releasing)
                return
            }
            if slot >> Self.addressBits & 0xFFFF == tag,
               MemtableNode(UnsafeMutableRawPointer(bitPattern: slot & Self.addressMask)!).compare(with: key) == 0 {
                atomic.store(tagged, ordering: .releasing)
                return
            }
            index = (index + 1) & mask
        }
    }
}

/// A Bloom filter over the memtable's keys, blocked to one 64-bit word per key (four bits
/// of it set), so a lookup of a key the memtable lacks usually ends after one load from a
/// table an eighth of the index's size (1 MiB for the default 64 MiB memtable: it stays in
/// the L2/L3 cache where the index's random slots do not). About 10 bits per key at the
/// index's fill limit; false positives (a few percent) fall through to the index.
///
/// Invariant MemtableIndex.F1: every key inserted has its bits set before the version holding it is
/// published. Thread-safety: the single writer sets bits (load, or, store: no other
/// writer); readers load words relaxed, ordered after the writes by the engine's
/// publication of the version they read (SnapshotRegistry: the publication count is
/// stored releasing and loaded acquiring, the view under a lock).
struct MemtableFilter {
    private let words: UnsafeMutablePointer<UnsafeAtomic<UInt64>.Storage>
    private let mask: Int

    /// A filter with `words` 64-bit words (a power of two); `populated` as for the index.
    init(words: Int, populated: Bool = false) {
        precondition(words > 0 && words & (words - 1) == 0, "a filter's size is a power of two")
        self.words = MappedMemory.allocate(words * MemoryLayout<UInt64>.stride, populated: populated)
            .bindMemory(to: UnsafeAtomic<UInt64>.Storage.self, capacity: words)
        mask = words - 1
    }

    func deallocate() { MappedMemory.deallocate(words, byteCount: (mask + 1) * MemoryLayout<UInt64>.stride) }

    /// Four bits of one word, from the hash's bits the index does not use for its slot.
    @inline(__always)
    private func bits(_ hash: UInt64) -> (word: UnsafeAtomic<UInt64>, bits: UInt64) {
        let word = UnsafeAtomic<UInt64>(at: words + (Int(truncatingIfNeeded: hash >> 24) & mask))
        let one: UInt64 = 1
        let bits = one << (hash & 63) | one << (hash >> 6 & 63) | one << (hash >> 12 & 63) | one << (hash >> 18 & 63)
        return (word, bits)
    }

    /// Whether a key with this hash may be in the memtable (false: it certainly is not).
    @inline(__always)
    func mayContain(_ hash: UInt64) -> Bool {
        let (word, bits) = bits(hash)
        return word.load(ordering: .relaxed) & bits == bits
    }

    /// Starts loading the word a key with this hash sets (a hint, before `add`).
    @inline(__always)
    func prefetch(_ hash: UInt64) { cplatform_prefetch(words + (Int(truncatingIfNeeded: hash >> 24) & mask)) }

    /// Records a key's hash (writer only).
    func add(_ hash: UInt64) {
        let (word, bits) = bits(hash)
        let current = word.load(ordering: .relaxed)
        if current & bits != bits { word.store(current | bits, ordering: .relaxed) }
    }
}

/// A 64-bit hash of a key: 8 bytes at a time through a multiply-rotate step, then
/// MurmurHash3's finalizer (every input bit affects every output bit).
@inline(__always)
func hashKey(_ key: UnsafeRawBufferPointer) -> UInt64 {
    var hash = 0x243F_6A88_85A3_08D3 ^ UInt64(key.count)
    var offset = 0
    while offset + 8 <= key.count {
        let chunk = key.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
        hash = (hash ^ chunk) &* 0x9E37_79B9_7F4A_7C15
        hash = (hash << 31) | (hash >> 33)
        offset += 8
    }
    if offset < key.count {
        var tail: UInt64 = 0
        for index in offset..<key.count { tail = tail << 8 | UInt64(key[index]) }
        hash = (hash ^ tail) &* 0x9E37_79B9_7F4A_7C15
    }
    return finalizeHash(hash)
}

/// MurmurHash3's 64-bit finalizer: a bijection after which every input bit affects every
/// output bit (`hashKey`'s last step, and `DistinctKeyEstimate`'s mix of a seeded hash).
@inline(__always)
func finalizeHash(_ value: UInt64) -> UInt64 {
    var hash = value
    hash ^= hash >> 33
    hash = hash &* 0xFF51_AFD7_ED55_8CCD
    hash ^= hash >> 33
    hash = hash &* 0xC4CE_B9FE_1A85_EC53
    hash ^= hash >> 33
    return hash
}
