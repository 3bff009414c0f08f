import StrataFileIO
import Testing
@testable import StrataEngine
@testable import StrataWAL

/// Recovery's replay (ReplayedChanges.swift) with a compaction threshold small enough to
/// cross many times: whether a look copies the last changes (most superseded) or leaves them
/// (most are last), the memtable it links holds each key's last change, deletes included.
@Suite struct ReplayedChangesTests {
    @Test(arguments: [("few keys, written over and over", 8), ("mostly new keys", 100_000)])
    func theLastChangeOfEveryKeyWinsAcrossCompactions(shape: String, keySpace: Int) {
        let seed: UInt64 = 2026_1126
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let changes = ReplayedChanges(budgetBytes: 1 << 20, compactionBytes: 4096)
        var model: [[UInt8]: (version: UInt64, value: [UInt8]?)] = [:]
        for version in UInt64(1)...400 {
            var batch = WALBatch()
            for _ in 0..<10 {
                let key = Array("k\(random.next() % UInt64(keySpace))".utf8)
                if random.next() % 5 == 0 {
                    batch.delete(key)
                    model[key] = (version, nil)
                } else {
                    let value = Array("v\(version)-\(random.next() % 1000)".utf8)
                    batch.put(key, value)
                    model[key] = (version, value)
                }
            }
            let bytes = batch.encoded()
            let record = WALRecord(lsn: LSN(version), path: "test", offset: 0, frameCount: 1, rawBytes: bytes.count,
                                   storedBytes: bytes.count, operationCount: batch.operations.count, body: .whole(bytes))
            changes.append(record, version: version)
        }
        #expect(changes.compactions >= 3, "\(shape): \(changes.compactions) looks")
        // Only the changes of a few keys are worth a copy, or an exact look: the estimate of
        // the keys turns the others away.
        #expect((changes.exactLooks > 0) == (keySpace == 8), "\(shape): \(changes.exactLooks) exact looks")
        #expect((changes.copies > 0) == (keySpace == 8), "\(shape): \(changes.copies) copies")
        let memtable = changes.linkLatest()
        for (key, last) in model {
            let entry = memtable.entry(key)
            #expect(entry?.version == last.version && entry?.value == last.value, "\(shape): \(key)")
        }
        var linked = 0
        var iterator = memtable.entries(from: nil, reverse: false)
        while iterator.next() != nil { linked += 1 }
        #expect(linked == model.count, "\(shape): one entry a key")
    }

    /// The estimate of distinct keys that lets a replay skip its exact look: within 6 % (or
    /// one key) from one key to a million, whether each key comes once or several times,
    /// under eight seeds.
    @Test func distinctKeysAreEstimatedWithinAFewPercent() {
        let seed: UInt64 = 2026_1203
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        #expect(DistinctKeyEstimate().estimate == 0)
        // Each key's hash, one to three times.
        var hashes: [UInt64] = []
        var counts: [(keys: Int, hashes: Int)] = []
        var next = 0
        for keys in [1, 8, 100, 1_000, 10_000, 100_000, 1_000_000] {
            for number in next..<keys {
                let hash = Array("key \(number)".utf8).withUnsafeBytes { hashKey($0) }
                for _ in 0...(random.next() % 3) { hashes.append(hash) }
            }
            next = keys
            counts.append((keys, hashes.count))
        }
        for _ in 0..<8 {
            let estimateSeed = random.next()
            var estimate = DistinctKeyEstimate(seed: estimateSeed)
            var added = 0
            for (keys, hashCount) in counts {
                while added < hashCount {
                    estimate.add(hashes[added])
                    added += 1
                }
                // A few keys may share a register (two of eight, under one seed in a few
                // hundred): one key off is within bounds there.
                let error = abs(estimate.estimate - Double(keys))
                #expect(error < max(0.06 * Double(keys), 1.01), "\(keys) keys estimated as \(estimate.estimate) (seed \(estimateSeed))")
            }
        }
    }

    /// Keys picked so that their hashes, under one seed, look like the most keys the
    /// estimate can count (what a forged log would do against an unseeded hash) look like
    /// as many keys as they are under any other seed.
    @Test func keysPickedAgainstOneSeedLookRandomUnderAnother() {
        // The inverse of MurmurHash3's finalizer, which `DistinctKeyEstimate.add` applies
        // to the seeded hash: x ^= x >> 33 is its own inverse, and an odd multiplier has
        // one modulo 2^64 (Newton's iteration, each step doubling the bits that are right).
        func inverse(_ odd: UInt64) -> UInt64 {
            var inverse = odd
            for _ in 0..<5 { inverse = inverse &* (2 &- odd &* inverse) }
            return inverse
        }
        func unmix(_ mixed: UInt64) -> UInt64 {
            var hash = mixed
            hash ^= hash >> 33
            hash = hash &* inverse(0xC4CE_B9FE_1A85_EC53)
            hash ^= hash >> 33
            hash = hash &* inverse(0xFF51_AFD7_ED55_8CCD)
            hash ^= hash >> 33
            return hash
        }
        for value: UInt64 in [0, 1, 0x1234_5678_9ABC_DEF0, .max] { #expect(unmix(finalizeHash(value)) == value) }
        // One hash per register, mixing under `known` to that register's highest rank.
        let known: UInt64 = 0x5EED_0F_4F0E
        let crafted = (0..<UInt64(4_096)).map { register in unmix(register << 52 | 1) ^ known }
        var fooled = DistinctKeyEstimate(seed: known)
        for hash in crafted { fooled.add(hash) }
        #expect(fooled.estimate > 1e15, "the crafted hashes did not fool the seed they were made for")
        let seed: UInt64 = 2026_1203_2
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        for _ in 0..<8 {
            let other = random.next()
            var estimate = DistinctKeyEstimate(seed: other)
            for hash in crafted { estimate.add(hash) }
            #expect(abs(estimate.estimate - 4_096) / 4_096 < 0.06, "4,096 crafted keys estimated as \(estimate.estimate) (seed \(other))")
        }
    }
}
