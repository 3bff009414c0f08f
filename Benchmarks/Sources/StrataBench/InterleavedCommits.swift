// `--interleave N` for fillsync: every engine's store open in this one process, their
// one-key durable commits in turns of N, the engine that goes first rotating from turn to
// turn, each engine's turns timed and summed (as InterleavedReads does for reads).
//
// A durable commit waits for the disk's flush, whose time on this machine drifts from
// minute to minute: run one after the other, Strata and the raw fdatasync engine came out
// at 0.70 to 1.01 × in nine runs of one sitting, and which of the two ran first moved the
// ratio more than either engine did. Turns of a second or less share that drift.
//
// Every engine commits the same keys in the same order, each key its own transaction,
// and every engine but `fdatasync` must hold all of them at the end.
import Foundation
import Histogram
import StrataTesting

enum InterleavedCommits {
    /// The workloads `--interleave` runs this way.
    static let workloads: Set<String> = ["fillsync"]
    /// The engines it runs: every engine that commits one key durably, `strata-relaxed`
    /// (which does not), GRDB (records only) and etcd excepted (the LSMs' memtables do not
    /// fill at the key counts this workload runs, so no flush runs into another engine's turn).
    static let engines: Set<String> = ["strata", "strata-small", "strata-lz4", "fdatasync", "sqlite", "lmdb", "leveldb", "rocksdb"]

    /// `workload` on every engine of `engines`, one-key commits in turns of `slice`, a
    /// result each.
    static func run(engines: [String], workload: String, slice: Int, options: StrataBench) throws -> [Result] {
        let keys = options.num ?? 2_000
        let valueSize = options.valueSize(for: workload)
        var random = SplitMix64(seed: options.seed)
        let values = Workload.values(count: keys, bytes: valueSize, random: &random)
        let value: @Sendable (Int) -> [UInt8]? = { values[$0 % values.count] }

        var opened: [(engine: String, directory: String, bench: any BenchEngine)] = []
        defer {
            for entry in opened {
                try? entry.bench.close()
                try? FileManager.default.removeItem(atPath: entry.directory)
            }
        }
        for engine in engines {
            let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
            let bench = try Runner(engine: engine, workload: workload, options: options).makeEngine(directory: directory, keys: keys)
            opened.append((engine, directory, bench))
        }
        FileHandle.standardError.write(Data("committing \(keys) keys on \(engines.joined(separator: ", ")) in turns of \(slice)…\n".utf8))

        var nanoseconds = [UInt64](repeating: 0, count: opened.count)
        var histograms = opened.map { _ in Histogram<UInt64>.latencies() }
        try Turns.run(total: keys, slice: slice, engines: opened.count) { index, items in
            let bench = opened[index].bench
            let start = monotonicNanoseconds()
            var before = start
            for key in items {
                do { try bench.write([key][...], values: value) } catch {
                    throw BenchError(description: "\(opened[index].engine) \(workload): \(error)")
                }
                let after = monotonicNanoseconds()
                _ = histograms[index].record(after - before)
                before = after
            }
            nanoseconds[index] += before - start
        }

        for entry in opened where entry.engine != "fdatasync" {
            let stored = try entry.bench.scanCount()
            guard stored == keys else { throw BenchError(description: "\(entry.engine) \(workload) stored \(stored) of \(keys) keys") }
        }
        let pairBytes = Workload.key(0).count + valueSize
        var results: [Result] = []
        for index in opened.indices {
            // Out of `opened` before its close, which the cleanup above must not repeat.
            let entry = opened.removeFirst()
            defer { try? FileManager.default.removeItem(atPath: entry.directory) }
            let syncs = entry.bench.fdatasyncs
            try entry.bench.close()
            let bytesOnDisk = StrataBench.directoryBytes(entry.directory)
            results.append(Result(engine: entry.engine, bench: workload, num: keys, batch: 1, valueSize: valueSize,
                                  seconds: Double(nanoseconds[index]) / 1e9, bytesOnDisk: bytesOnDisk, fdatasyncs: syncs,
                                  latency: Latencies(histograms[index]),
                                  spaceAmplification: entry.engine == "fdatasync" ? nil : Double(bytesOnDisk) / Double(keys * pairBytes)))
        }
        return results
    }
}
