// `--interleave N` for ycsb-c: every engine's store loaded in this one process, then their
// reads in turns of N, the engine that goes first rotating from turn to turn, each engine's
// turns timed and summed (as RecordWorkloads.interleaved does for the record queries).
//
// Run one after the other, two engines' rates of ycsb-c at two threads on this machine
// moved by more than half between runs of the same binaries (Strata 1.43M–2.19M reads/s,
// LMDB 1.69M–2.78M in three runs of 4M reads), and so did their ratio (0.51–1.29 ×): the
// machine's drift, not the engines. Turns of a fraction of a second share that drift.
//
// The stores are settled before the first turn: every engine's load is over, and
// Strata's loaded keys are checkpointed into its tree, as its idle checkpoint does a
// second after the last commit (run one after the other, that checkpoint may run beside
// the timed reads, or not, as the run's timing falls). Every thread reads the same keys,
// in the same order, from every engine.
import Foundation
import Histogram
import StrataTesting
import Synchronization

enum InterleavedReads {
    /// The workloads `--interleave` runs this way: those that only read keys.
    static let workloads: Set<String> = ["ycsb-c"]
    /// The engines it runs: those with no work of their own left once settled (the LSMs'
    /// compactions would run on into the other engines' turns).
    static let engines: Set<String> = ["strata", "strata-small", "strata-lz4", "lmdb", "sqlite"]

    /// `workload` on every engine of `engines`, reads in turns of `slice` (from all threads
    /// together), a result each.
    static func run(engines: [String], workload: String, slice: Int, options: StrataBench) throws -> [Result] {
        var mix = try YCSB.Mix(workload)
        if let chosen = options.distribution { mix.distribution = chosen }
        let records = options.num ?? 1_000_000
        let operations = options.operations
        let threads = max(1, options.threads ?? 1)
        let valueSize = options.valueSize(for: workload)
        var random = SplitMix64(seed: options.seed)
        let values = Workload.values(count: records, bytes: valueSize, random: &random)
        let value: @Sendable (Int) -> [UInt8]? = { values[$0 % values.count] }

        struct Loaded {
            let engine: String
            let directory: String
            let bench: any BenchEngine
            let readers: UncheckedReaders
        }
        var loaded: [Loaded] = []
        defer {
            for entry in loaded {
                for reader in entry.readers.readers { reader.close() }
                try? entry.bench.close()
                try? FileManager.default.removeItem(atPath: entry.directory)
            }
        }
        for engine in engines {
            FileHandle.standardError.write(Data("loading \(engine) \(workload)…\n".utf8))
            let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
            let bench = try Runner(engine: engine, workload: workload, options: options).makeEngine(directory: directory, keys: records)
            do {
                for start in stride(from: 0, to: records, by: options.batch) {
                    try bench.write(ArraySlice(start..<min(records, start + options.batch)), values: value)
                }
                if let strata = bench as? StrataEngineBench { try strata.engine.checkpoint() }
                let readers = UncheckedReaders(try (0..<threads).map { _ in try bench.makeReader() })
                loaded.append(Loaded(engine: engine, directory: directory, bench: bench, readers: readers))
            } catch {
                try? bench.close()
                try? FileManager.default.removeItem(atPath: directory)
                throw error
            }
        }

        // Each thread's keys: the same generator, seeded the same, for every engine.
        let keys = KeyPicker(mix.distribution, records: records)
        let generators = Mutex((0..<loaded.count).map { _ in
            (0..<threads).map { SplitMix64(seed: options.seed &+ 7_919 &* UInt64($0 + 1)) }
        })
        var seconds = [Double](repeating: 0, count: loaded.count)
        let recorders = loaded.map { _ in LatencyRecorder() }
        let failure = Mutex<String?>(nil)
        try Turns.run(total: operations, slice: slice, engines: loaded.count) { index, items in
            let count = items.count
            let readers = loaded[index].readers
            let recorder = recorders[index]
            let start = ContinuousClock.now
            DispatchQueue.concurrentPerform(iterations: threads) { thread in
                var generator = generators.withLock { $0[index][thread] }
                var histogram = Histogram<UInt64>.latencies()
                let reader = readers.readers[thread]
                do {
                    for _ in stride(from: thread, to: count, by: threads) {
                        let key = keys.pick(&generator, existing: records)
                        let before = monotonicNanoseconds()
                        guard try reader.read(key) else { throw BenchError(description: "key \(key) was not found") }
                        _ = histogram.record(monotonicNanoseconds() - before)
                    }
                } catch {
                    failure.withLock { $0 = $0 ?? "\(error)" }
                }
                generators.withLock { $0[index][thread] = generator }
                recorder.add(histogram)
            }
            let elapsed = start.duration(to: .now)
            seconds[index] += Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            if let message = failure.withLock({ $0 }) {
                throw BenchError(description: "\(loaded[index].engine) \(workload): \(message)")
            }
        }

        let pairBytes = Workload.key(0).count + valueSize
        var results: [Result] = []
        for (index, entry) in loaded.enumerated() {
            for reader in entry.readers.readers { reader.close() }
            let syncs = entry.bench.fdatasyncs
            try entry.bench.close()
            let bytesOnDisk = StrataBench.directoryBytes(entry.directory)
            try? FileManager.default.removeItem(atPath: entry.directory)
            let histogram = recorders[index].histogram.withLock { $0 }
            results.append(Result(engine: entry.engine, bench: workload, num: operations, batch: 1, valueSize: valueSize,
                                  seconds: seconds[index], bytesOnDisk: bytesOnDisk, fdatasyncs: syncs,
                                  latency: histogram.totalCount > 0 ? Latencies(histogram) : nil,
                                  spaceAmplification: Double(bytesOnDisk) / Double(records * pairBytes)))
        }
        loaded.removeAll()
        return results
    }
}

/// An existing key picked by a distribution: `0..<existing` exist, the newest last.
struct KeyPicker: Sendable {
    let distribution: YCSB.Distribution
    let zipfian: ZipfianRanks

    /// Picks among `records` at most.
    init(_ distribution: YCSB.Distribution, records: Int) {
        self.distribution = distribution
        zipfian = ZipfianRanks(count: records)
    }

    func pick(_ random: inout SplitMix64, existing: Int) -> Int {
        switch distribution {
        case .uniform: Int(random.next() % UInt64(existing))
        case .zipfian: Int(fnv1a64(zipfian.next(&random)) % UInt64(existing))
        case .latest: max(0, existing - 1 - zipfian.next(&random))
        }
    }
}

/// Engines' turns at a shared workload: `total` items in turns of `slice`, every engine
/// taking each turn's items, the engine that goes first rotating from turn to turn.
enum Turns {
    static func run(total: Int, slice: Int, engines: Int, _ body: (_ engine: Int, _ items: Range<Int>) throws -> Void) rethrows {
        var (done, turn) = (0, 0)
        while done < total {
            let items = done..<min(total, done + slice)
            for step in 0..<engines { try body((turn + step) % engines, items) }
            (done, turn) = (items.upperBound, turn + 1)
        }
    }
}
