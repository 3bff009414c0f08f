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
        // Only the changes of a few keys are worth a copy.
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

    /// The estimate of distinct keys that lets a replay skip its exact look: within a few
    /// percent from one key to a million, whether each key comes once or several times.
    @Test func distinctKeysAreEstimatedWithinAFewPercent() {
        let seed: UInt64 = 2026_1203
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        #expect(DistinctKeyEstimate().estimate == 0)
        for count in [1, 8, 100, 1_000, 10_000, 100_000, 1_000_000] {
            var estimate = DistinctKeyEstimate()
            var added = 0
            for number in 0..<count {
                let key = Array("key \(number)".utf8)
                // Each key one to three times.
                for _ in 0...(random.next() % 3) {
                    key.withUnsafeBytes { estimate.add(hashKey($0)) }
                    added += 1
                }
            }
            let error = abs(estimate.estimate - Double(count)) / Double(count)
            #expect(error < 0.05, "\(count) keys (\(added) added) estimated as \(estimate.estimate)")
        }
    }
}
