import StrataFileIO
import Testing
import StrataWAL
@testable import StrataEngine

/// Seeded random puts, deletes, reads, scans, checkpoints and reopens against a plain
/// dictionary model.
@Suite struct EngineModelTests {
    private func key(_ number: UInt64) -> [UInt8] { Array("k\(number % 2000)".utf8) }

    @Test(arguments: [UInt64(1), 2, 3])
    func randomOperationsMatchADictionary(seed: UInt64) throws {
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        options.log.segmentBytes = 64 << 10
        var engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options).engine
        var model: [[UInt8]: [UInt8]] = [:]
        for step in 0..<10_000 {
            let roll = random.next() % 100
            switch roll {
            case 0..<45:
                var batch = WALBatch()
                for _ in 0..<(random.next() % 4 + 1) {
                    let k = key(random.next())
                    if random.next() % 4 == 0 {
                        batch.delete(k)
                        model[k] = nil
                    } else {
                        let size = random.next() % 10 == 0 ? Int(random.next() % 9000) : Int(random.next() % 60)
                        let value = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                        batch.put(k, value)
                        model[k] = value
                    }
                }
                try engine.commit(batch)
            case 45..<80:
                let k = key(random.next())
                #expect(try engine.snapshot().get(k) == model[k], "seed \(seed) step \(step): get")
            case 80..<92:
                let start = key(random.next())
                let reverse = random.next() % 2 == 0
                let limit = Int(random.next() % 30) + 1
                let got = try engine.snapshot().scan(from: reverse ? nil : start, to: reverse ? start : nil,
                                                     reverse: reverse, limit: limit)
                let expected = model.filter { reverse ? compareKeys($0.key, start) < 0 : compareKeys($0.key, start) >= 0 }
                    .sorted { reverse ? compareKeys($0.key, $1.key) > 0 : compareKeys($0.key, $1.key) < 0 }
                    .prefix(limit)
                #expect(got.map(\.key) == expected.map(\.key), "seed \(seed) step \(step): scan keys")
                #expect(got.map(\.value) == expected.map(\.value), "seed \(seed) step \(step): scan values")
            case 92..<97:
                try engine.checkpoint()
                let report = engine.verify()
                #expect(report.isValid, "seed \(seed) step \(step): \(report)")
            default:
                try engine.close()
                engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options).engine
            }
        }
        try engine.checkpoint()
        let meta = engine.checkpointLock.withLock { $0.meta }
        print("seed \(seed): tree of height \(meta.height), \(meta.keyCount) keys, \(meta.pageCount) pages, generation \(meta.generation)")
        #expect(meta.height >= 2 && meta.keyCount == UInt64(model.count))
        let report = engine.verify()
        #expect(report.isValid, "\(report)")
        #expect(report.freePages > 0, "pages replaced by checkpoints are on the free list")
        let all = try engine.snapshot().scan()
        #expect(all.count == model.count)
        #expect(Dictionary(uniqueKeysWithValues: all.map { ($0.key, $0.value) }) == model)
        try engine.close()
    }
}
