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
//
// fillsync-concurrent the same way: every engine has two stores, one written by T
// committer threads in its turns and one by a single committer in turns between them, so
// that the rate of T committers and of one come from the same minutes of the disk. (One
// after the other, eight Strata committers came out at 2.50 to 3.38 × one in six runs.)
import Foundation
import Histogram
import StrataTesting
import Synchronization

enum InterleavedCommits {
    /// The workloads `--interleave` runs this way.
    static let workloads: Set<String> = ["fillsync", "fillsync-concurrent"]
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

        // fillsync-concurrent: each engine's store of `committers` threads, then its store of one.
        let committers = workload == "fillsync-concurrent" ? options.threads ?? 8 : 1
        var opened: [(engine: String, threads: Int, directory: String, bench: any BenchEngine)] = []
        defer {
            for entry in opened {
                try? entry.bench.close()
                try? FileManager.default.removeItem(atPath: entry.directory)
            }
        }
        for engine in engines {
            for threads in committers > 1 ? [committers, 1] : [1] {
                let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
                let bench = try Runner(engine: engine, workload: workload, options: options).makeEngine(directory: directory, keys: keys)
                opened.append((engine, threads, directory, bench))
            }
        }
        let who = committers > 1 ? ", by \(committers) committers and by one," : ""
        FileHandle.standardError.write(Data("committing \(keys) keys on \(engines.joined(separator: ", "))\(who) in turns of \(slice)…\n".utf8))

        let pool = committers > 1 ? CommitterPool(count: committers) : nil
        defer { pool?.stop() }
        var nanoseconds = [UInt64](repeating: 0, count: opened.count)
        let recorders = opened.map { _ in LatencyRecorder() }
        try Turns.run(total: keys, slice: slice, engines: opened.count) { index, items in
            let (bench, recorder) = (opened[index].bench, recorders[index])
            let failure = FirstFailure()
            let start = monotonicNanoseconds()
            if let pool, opened[index].threads > 1 {
                // Committer `thread` commits every `committers`-th key of the turn.
                pool.run { thread in
                    var histogram = Histogram<UInt64>.latencies()
                    defer { recorder.add(histogram) }
                    for key in stride(from: items.lowerBound + thread, to: items.upperBound, by: committers) {
                        let before = monotonicNanoseconds()
                        do { try bench.write([key][...], values: value) } catch {
                            failure.note(error)
                            return
                        }
                        _ = histogram.record(monotonicNanoseconds() - before)
                    }
                }
            } else {
                var histogram = Histogram<UInt64>.latencies()
                defer { recorder.add(histogram) }
                var before = start
                for key in items {
                    do { try bench.write([key][...], values: value) } catch {
                        failure.note(error)
                        break
                    }
                    let after = monotonicNanoseconds()
                    _ = histogram.record(after - before)
                    before = after
                }
            }
            nanoseconds[index] += monotonicNanoseconds() - start
            if let message = failure.message { throw BenchError(description: "\(opened[index].engine) \(workload): \(message)") }
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
            let seconds = Double(nanoseconds[index]) / 1e9
            // A single committer's store of fillsync-concurrent gives the rate of its engine's row.
            if entry.threads < committers {
                results[results.count - 1].oneCommitterPerSecond = Double(keys) / seconds
                continue
            }
            let bytesOnDisk = StrataBench.directoryBytes(entry.directory)
            results.append(Result(engine: entry.engine, bench: workload, num: keys, batch: 1, valueSize: valueSize,
                                  seconds: seconds, bytesOnDisk: bytesOnDisk, fdatasyncs: syncs,
                                  latency: recorders[index].histogram.withLock { Latencies($0) },
                                  spaceAmplification: entry.engine == "fdatasync" ? nil : Double(bytesOnDisk) / Double(keys * pairBytes)))
        }
        return results
    }
}

/// Threads that each run their part of every job handed to `run`, kept for a run of
/// turns: a thread made per committer per turn would charge its start to the turn.
private final class CommitterPool: @unchecked Sendable {
    // @unchecked: `job` is set before the threads are signalled and read by them after;
    // the semaphores order the two.
    private let go: [DispatchSemaphore]
    private let finished = DispatchSemaphore(value: 0)
    private var job: (@Sendable (Int) -> Void)?

    init(count: Int) {
        go = (0..<count).map { _ in DispatchSemaphore(value: 0) }
        for thread in 0..<count {
            Thread.detachNewThread { [self] in
                while true {
                    go[thread].wait()
                    guard let job else {
                        finished.signal()
                        return
                    }
                    job(thread)
                    finished.signal()
                }
            }
        }
    }

    /// Runs `body` on every thread, each given its index, and returns once all returned.
    func run(_ body: @escaping @Sendable (Int) -> Void) {
        job = body
        for semaphore in go { semaphore.signal() }
        for _ in go { finished.wait() }
    }

    /// Ends the threads.
    func stop() {
        job = nil
        for semaphore in go { semaphore.signal() }
        for _ in go { finished.wait() }
    }
}

/// The first error any committer of a turn met, as text.
private final class FirstFailure: Sendable {
    private let first = Mutex<String?>(nil)

    func note(_ error: any Error) { first.withLock { $0 = $0 ?? "\(error)" } }

    var message: String? { first.withLock { $0 } }
}
