// The hot paths, one benchmark each, with allocation counts (per operation: the
// benchmarks run 1,000 operations per measured iteration and report per operation):
// - relaxed commit: encode, LZ4 and frame one 10-key batch, hand it to group commit and
//   publish it to the memtable (`.relaxed` on the in-memory store, so the disk is out of
//   the picture). Expect a few microseconds; allocations: the encoded batch, the frame
//   buffer, the memtable's nodes.
// - B+tree lookup: a point read of a checkpointed key through a snapshot (page cache
//   hit, in-place binary search). Expect about a microsecond.
// - overlay get: a read that a context's own overlay answers (a persistent-map walk).
//   Expect well under a microsecond, no allocation.
// - child commit: open a child, stage 10 puts, merge it into its parent (no I/O).
//   Expect O(10 log n) node allocations.
// - record encode / decode: a four-field `Codable` record to its bytes and back (the
//   streaming encoder; the decoder reading fields in place after one validating pass).
//   Expect a few microseconds; a handful of allocations (the bytes, the strings, the
//   keyed container's box).
// - record fetch by a unique index: `first(#Predicate { $0.email == email })` among
//   1,000 records: planning, the index entry, the record, its decoding.
// The stores are built once, outside the measurements. (Retain and release counts are
// left out: on Linux with Swift 6.3 they need a runtime interposer this machine lacks.)
import Benchmark
import Foundation
import StrataTesting

struct Reader: Record {
    var id: Int
    var email: String
    var city: String
    var age: Int

    static var indexes: [RecordIndex<Reader>] {
        [.index(\Reader.email, unique: true), .index(\Reader.city), .index(\Reader.age)]
    }

    init(_ number: Int) {
        id = number
        email = "reader\(number)@example.org"
        city = "city\(number % 100)"
        age = 18 + number % 70
    }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .throughput, .mallocCountTotal],
                                           scalingFactor: .kilo, maxDuration: .seconds(2))

    let keys = (0..<100_000).map { Array(String(format: "%016d", $0).utf8) }
    let value = [UInt8]((0..<100).map { UInt8(truncatingIfNeeded: $0 &* 7) })

    var relaxed = EngineOptions()
    relaxed.log.durability = .relaxed
    let relaxedEngine = try! Store.inMemory(options: relaxed).engine
    var batch = WALBatch()
    for key in keys.prefix(10) { batch.put(key, value) }
    let tenKeys = batch

    let engine = try! Store.inMemory().engine
    for start in stride(from: 0, to: keys.count, by: 1_000) {
        var batch = WALBatch()
        for key in keys[start..<(start + 1_000)] { batch.put(key, value) }
        try! engine.commit(batch)
    }
    try! engine.checkpoint()
    let snapshot = engine.snapshot()

    let store = try! Store.inMemory()
    nonisolated(unsafe) let context = store.makeContext()
    for key in keys.prefix(10_000) { try! context.put(key, value) }

    let reader = Reader(42)
    let readerBytes = try! RecordEncoder().encode(reader)
    let readers = try! Store.inMemory()
    try! readers.write { unit in
        let repository = unit.repository(Reader.self)
        for number in 0..<1_000 { try repository.insert(Reader(number)) }
    }
    let emails = (0..<1_000).map { Reader($0).email }

    Benchmark("relaxed commit (10-key batch)") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try relaxedEngine.commit(tenKeys)) }
    }

    Benchmark("B+tree lookup (snapshot get, cached page)") { benchmark in
        var index = 0
        for _ in benchmark.scaledIterations {
            blackHole(try snapshot.get(keys[index]))
            index = (index &+ 7_919) % keys.count
        }
    }

    Benchmark("overlay get (context's own write)") { benchmark in
        var index = 0
        for _ in benchmark.scaledIterations {
            blackHole(try context.get(keys[index]))
            index = (index &+ 7_919) % 10_000
        }
    }

    Benchmark("child commit (10 puts merged into a parent of 10,000)") { benchmark in
        var round = 0
        for _ in benchmark.scaledIterations {
            let child = try context.makeChild()
            for offset in 0..<10 { try child.put(keys[(round * 10 + offset) % 10_000], value) }
            blackHole(try child.commit())
            round += 1
        }
    }

    Benchmark("record encode (4 fields)") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try RecordEncoder().encode(reader)) }
    }

    Benchmark("record decode (4 fields)") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try RecordDecoder().decode(Reader.self, from: readerBytes)) }
    }

    Benchmark("record fetch by a unique index (1,000 records)") { benchmark in
        try readers.read { context in
            let repository = context.repository(Reader.self)
            var index = 0
            for _ in benchmark.scaledIterations {
                let email = emails[index]
                blackHole(try repository.first(#Predicate<Reader> { $0.email == email }))
                index = (index &+ 7) % emails.count
            }
        }
    }
}
