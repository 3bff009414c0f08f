// One (engine, workload) measurement: set up a fresh directory, do the untimed fill the
// workload needs, time only the workload, verify its result the same way for every
// engine, and measure the bytes left on disk.
import Foundation
import Histogram
import Strata
@_spi(StorageEngine) import StrataTesting
import Synchronization

struct Runner {
    let engine: String
    let workload: String
    let options: StrataBench

    var valueSize: Int { options.valueSize(for: workload) }

    func run() throws -> Result {
        if workload == "recover" || workload == "reopen" { return try recover(checkpointed: workload == "reopen") }
        if workload.hasPrefix("ycsb-") { return try ycsb() }
        let syncWorkload = workload.hasPrefix("fillsync")
        let keys = options.num ?? (syncWorkload ? 2_000 : 1_000_000)
        let perTransaction = syncWorkload ? 1 : options.batch
        let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bench = try makeEngine(directory: directory, keys: keys)
        var random = SplitMix64(seed: options.seed)
        let values = Workload.values(count: keys, bytes: valueSize, random: &random)
        let value: @Sendable (Int) -> [UInt8]? = { values[$0 % values.count] }
        var order = Array(0..<keys)
        var shuffler = SplitMix64(seed: options.seed &+ 1)
        order.shuffle(using: &shuffler)

        // Untimed preparation.
        if ["overwrite", "readrandom", "readseq", "deleterandom", "readwhilewriting"].contains(workload) {
            for start in stride(from: 0, to: keys, by: perTransaction) {
                try bench.write(ArraySlice(start..<min(keys, start + perTransaction)), values: value)
            }
        }
        let writtenBefore = options.settle && ["overwrite", "deleterandom"].contains(workload)
            ? settledDeviceWrittenBytes(of: options.dir) : deviceWrittenBytes(of: options.dir)
        let start = ContinuousClock.now
        var operations = keys
        var writesPerSecond: Double?
        var writesAlonePerSecond: Double?
        var writtenKeys: Int?
        var readSeconds: Double?
        var intervals: [Int]?
        let latencies = LatencyRecorder()
        var scanSeconds: Double?
        switch workload {
        case "fillseq":
            try commitAll(Array(0..<keys), per: perTransaction, threads: 1, bench, latencies, value)
        case "fillrandom":
            try commitAll(order, per: perTransaction, threads: 1, bench, latencies, value)
        case "fillsync":
            try commitAll(Array(0..<keys), per: 1, threads: 1, bench, latencies, value)
        case "fillsync-concurrent":
            try commitAll(Array(0..<keys), per: 1, threads: options.threads ?? 8, bench, latencies, value)
        case "overwrite" where options.seconds != nil:
            (operations, intervals) = try sustainedOverwrite(bench, keys: keys, per: perTransaction, seconds: options.seconds!,
                                                             random: &shuffler, latencies, value)
        case "overwrite":
            try commitAll(order.map { _ in Int(shuffler.next() % UInt64(keys)) }, per: perTransaction, threads: 1, bench,
                          latencies, value)
        case "deleterandom":
            try commitAll(order, per: perTransaction, threads: 1, bench, latencies) { _ in nil }
        case "readwhilewriting":
            let besides = try readWhileWriting(bench, directory: directory, keys: keys, per: perTransaction,
                                               random: &shuffler, latencies: latencies, value)
            (operations, writtenKeys, writesPerSecond, writesAlonePerSecond) =
                (besides.reads, besides.written, besides.writesPerSecond, besides.writesAlonePerSecond)
            readSeconds = besides.readSeconds
        case "nested":
            let half = max(perTransaction / 2, 1)
            for first in stride(from: 0, to: keys, by: 2 * half) {
                let kept = first..<min(keys, first + half)
                try bench.nested(kept: order[kept], discarded: order[kept.upperBound..<min(keys, first + 2 * half)],
                                 values: value)
            }
        case "readrandom":
            try bench.beginReads()
            var found = 0
            var histogram = Histogram<UInt64>.latencies()
            // Every key once in random order, or `--reads` keys drawn from the shuffled order
            // (cycling through it again past N).
            let reads = options.reads ?? keys
            for index in 0..<reads {
                let key = order[index % keys]
                let before = monotonicNanoseconds()
                if try bench.read(key) { found += 1 }
                _ = histogram.record(monotonicNanoseconds() - before)
            }
            bench.endReads()
            latencies.add(histogram)
            guard found == reads else { throw BenchError(description: "\(engine) readrandom found \(found) of \(reads) keys") }
            operations = reads
        default: // readseq
            // Each scan timed alone; with `--passes` the median one is reported.
            var scans: [UInt64] = []
            for _ in 0..<options.passes {
                let before = monotonicNanoseconds()
                let count = try bench.scanCount()
                scans.append(monotonicNanoseconds() - before)
                guard count == keys else { throw BenchError(description: "\(engine) readseq scanned \(count) of \(keys) keys") }
            }
            if scans.count > 1 {
                scanSeconds = Double(scans.sorted()[scans.count / 2]) / 1e9
                let listed = scans.map { String(format: "%.1f", Double($0) / 1e6) }.joined(separator: ", ")
                FileHandle.standardError.write(Data("\(engine) readseq, each scan in ms: \(listed)\n".utf8))
            }
        }
        let elapsed = start.duration(to: .now)
        let seconds = scanSeconds ?? readSeconds ?? Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        if workload == "deleterandom", engine != "fdatasync" {
            let remaining = try bench.scanCount()
            guard remaining == 0 else { throw BenchError(description: "\(engine) deleterandom left \(remaining) keys") }
        }
        if workload == "nested" {
            // Exactly the first half of every root transaction's keys is stored.
            let half = max(perTransaction / 2, 1)
            let expected = stride(from: 0, to: keys, by: 2 * half).reduce(0) { $0 + min(half, keys - $1) }
            let stored = try bench.scanCount()
            guard stored == expected else { throw BenchError(description: "\(engine) nested stored \(stored) of \(expected) keys") }
        }
        let syncs = bench.fdatasyncs
        try bench.close()
        let writtenAfter = deviceWrittenBytes(of: options.dir)
        let written = writtenBefore.flatMap { before in writtenAfter.map { $0 - before } }
        let histogram = latencies.histogram.withLock { $0 }
        let bytesOnDisk = directoryBytes(directory)
        let pairBytes = Workload.key(0).count + valueSize
        // The keys and values the workload wrote, and those the store holds at the end.
        let (userBytes, liveBytes): (Int, Int) = switch workload {
        case "fillseq", "fillrandom", "fillsync", "fillsync-concurrent", "overwrite": (operations * pairBytes, keys * pairBytes)
        case "readwhilewriting": ((writtenKeys ?? 0) * pairBytes, keys * pairBytes)
        case "deleterandom": (keys * Workload.key(0).count, 0)
        case "nested": (keys / 2 * pairBytes, keys / 2 * pairBytes)
        default: (0, keys * pairBytes)
        }
        return Result(engine: engine, bench: workload, num: operations, batch: perTransaction, valueSize: valueSize,
                      seconds: seconds, bytesOnDisk: bytesOnDisk, fdatasyncs: syncs,
                      latency: histogram.totalCount > 0 ? Latencies(histogram) : nil, writesPerSecond: writesPerSecond,
                      writesAlonePerSecond: writesAlonePerSecond,
                      writeAmplification: userBytes > 0 ? written.map { Double($0) / Double(userBytes) } : nil,
                      spaceAmplification: liveBytes > 0 && engine != "fdatasync" ? Double(bytesOnDisk) / Double(liveBytes) : nil,
                      intervals: intervals)
    }

    /// `overwrite --seconds`: transactions of `per` random keys until `seconds` have
    /// passed; returns the keys written and the keys a second of each 10-second interval
    /// (the last one as long as it ran), each also printed as it ends.
    private func sustainedOverwrite(_ bench: any BenchEngine, keys: Int, per: Int, seconds: Int, random: inout SplitMix64,
                                    _ latencies: LatencyRecorder, _ value: (Int) -> [UInt8]?) throws -> (written: Int, intervals: [Int]) {
        let interval: UInt64 = 10_000_000_000
        let start = monotonicNanoseconds()
        let end = start + UInt64(seconds) * 1_000_000_000
        var histogram = Histogram<UInt64>.latencies()
        defer { latencies.add(histogram) }
        var intervals: [Int] = []
        var (written, intervalStart, writtenAtIntervalStart) = (0, start, 0)
        func closeInterval(at now: UInt64) {
            let rate = Double(written - writtenAtIntervalStart) / (Double(now - intervalStart) / 1e9)
            intervals.append(Int(rate))
            FileHandle.standardError.write(Data("overwrite \(engine): \((now - start) / 1_000_000_000) s, \(Int(rate)) keys/s\n".utf8))
            (intervalStart, writtenAtIntervalStart) = (now, written)
        }
        var now = start
        while now < end {
            let batch = (0..<per).map { _ in Int(random.next() % UInt64(keys)) }
            let before = monotonicNanoseconds()
            try bench.write(batch[...], values: value)
            let after = monotonicNanoseconds()
            _ = histogram.record(after - before)
            written += per
            now = after
            if now - intervalStart >= interval { closeInterval(at: now) }
        }
        if written > writtenAtIntervalStart { closeInterval(at: now) }
        return (written, intervals)
    }

    /// `readwhilewriting`: one writer overwrites random keys, `per` a transaction, while
    /// the readers (`ReadersBesideWriter`) read. It writes `keys` keys with the readers
    /// reading throughout; with `--interleave K`, phases of K keys (a whole number of
    /// transactions), the readers reading in every other one, the phase without them first
    /// in even pairs and second in odd ones: as many whole pairs as `keys` holds (at least
    /// one), or (`--seconds S`) pairs until S seconds have passed. Returns the reads, the keys written, the writer's keys a
    /// second with the readers reading and (with `--interleave`) without them, and the
    /// seconds the readers read.
    private func readWhileWriting(_ bench: any BenchEngine, directory: String, keys: Int, per: Int, random: inout SplitMix64,
                                  latencies: LatencyRecorder, _ value: @escaping @Sendable (Int) -> [UInt8]?) throws
        -> (reads: Int, written: Int, writesPerSecond: Double, writesAlonePerSecond: Double?, readSeconds: Double) {
        let readers = try ReadersBesideWriter(bench, engine: engine, directory: directory, keys: keys, options: options,
                                              latencies: latencies)
        let phase = options.interleave.map { max(per, $0 / per * per) } ?? keys
        // (`--seconds` times readwhilewriting only with `--interleave`: without, it is
        // overwrite's, when the two run in one process.)
        let end = options.interleave == nil ? nil : options.seconds.map { monotonicNanoseconds() + UInt64($0) * 1_000_000_000 }
        // Nanoseconds and keys of the writer's phases, without readers [0] and with them [1].
        var spent: [UInt64] = [0, 0]
        var written = [0, 0]
        var pairs: [Double] = []
        // How long the readers took to get ready for the last phase with them (reader
        // processes replay there what the writer committed while they were idle), and in all.
        var readying: UInt64 = 0
        var readyingTotal: UInt64 = 0
        // Whole pairs of phases, as many as `keys` holds (at least one), or as S seconds take.
        let pairCount = options.interleave == nil ? 1 : max(1, keys / (2 * phase))
        var pair = 0
        do {
            repeat {
                let order = options.interleave == nil ? [true] : pair % 2 == 0 ? [false, true] : [true, false]
                var rates: [Double] = [0, 0]
                for withReaders in order {
                    let slice = (0..<phase).map { _ in Int(random.next() % UInt64(keys)) }
                    if withReaders {
                        let asked = monotonicNanoseconds()
                        try readers.resume()
                        readying = monotonicNanoseconds() - asked
                        readyingTotal += readying
                    } else if options.interleave != nil && readying > 0 {
                        // The writer waits as long before a phase without readers as the
                        // readers took to get ready before the last phase with them: its
                        // checkpoint, which runs on while it waits, gets the same start
                        // before either kind of phase.
                        usleep(useconds_t(min(readying / 1_000, UInt64(UInt32.max))))
                    }
                    let start = monotonicNanoseconds()
                    try commitAll(slice, per: per, threads: 1, bench, LatencyRecorder(), value)
                    let took = monotonicNanoseconds() - start
                    if withReaders { try readers.pause() }
                    let index = withReaders ? 1 : 0
                    (spent[index], written[index]) = (spent[index] + took, written[index] + phase)
                    rates[index] = Double(phase) / (Double(took) / 1e9)
                }
                if rates[0] > 0 { pairs.append(rates[1] / rates[0]) }
                pair += 1
            } while end.map { monotonicNanoseconds() < $0 } ?? (pair < pairCount)
        } catch {
            _ = try? readers.finish()
            throw error
        }
        let (threadReads, processRate) = try readers.finish()
        let readSeconds = Double(spent[1]) / 1e9
        let writesPerSecond = Double(written[1]) / readSeconds
        let alone = options.interleave == nil ? nil : Double(written[0]) / (Double(spent[0]) / 1e9)
        let reads = threadReads + Int(processRate * readSeconds)
        let readText = "\(options.readers) thread(s) \(Int(Double(threadReads) / readSeconds)) reads/s"
            + (readers.hasProcesses ? ", \(options.readerProcesses) process(es) \(Int(processRate)) reads/s" : "")
        let beside = alone.map { alone in
            let ratios = pairs.map { String(format: "%.2f", $0) }.joined(separator: ", ")
            // (One phase with readers a pair.)
            let ready = String(format: "%.1f", Double(readyingTotal) / Double(max(1, pair)) / 1e6)
            return "; without readers \(Int(alone)) keys/s (\(String(format: "%.2f", writesPerSecond / alone)) ×; "
                + "readers ready in \(ready) ms a phase; each pair: \(ratios))"
        } ?? ""
        FileHandle.standardError.write(Data(("readwhilewriting \(engine): writer \(Int(writesPerSecond)) keys/s with \(readText)"
            + beside + "\n").utf8))
        // Process reads count at the rate each process measured over its reading time.
        return (reads, written[0] + written[1], writesPerSecond, alone, readSeconds)
    }

    /// `recover`: an untimed fill with checkpoints off (everything stays in the log), a
    /// close without checkpoint, then the timed reopen that replays the log. `reopen`: the
    /// same fill, then one checkpoint and a close without shrinking the log (what a process
    /// killed after a checkpoint leaves), then the timed open, which replays nothing.
    private func recover(checkpointed: Bool) throws -> Result {
        let keys = options.num ?? 1_000_000
        let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let durability: Durability = engine == "strata-relaxed" ? .relaxed : .full
        let filler = try StrataEngineBench(directory: directory, durability: durability, checkpoints: false)
        var random = SplitMix64(seed: options.seed)
        let values = Workload.values(count: keys, bytes: valueSize, random: &random)
        for start in stride(from: 0, to: keys, by: options.batch) {
            try filler.write(ArraySlice(start..<min(keys, start + options.batch))) { values[$0 % values.count] }
        }
        if checkpointed { try filler.engine.checkpoint() }
        try filler.engine.close(checkpoint: false)
        var engineOptions = EngineOptions(durability: durability)
        engineOptions.checkpointMemtableBytes = .max
        engineOptions.checkpointLogBytes = .max
        let start = ContinuousClock.now
        let (engine, report) = try StorageEngine.open(path: directory, options: engineOptions)
        let elapsed = start.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let found = try engine.snapshot().get(Workload.key(keys - 1)) != nil
        // Untimed by the workload's rate: point reads of the keys just replayed, all in the
        // memtable recovery made (what a process reads first after a crash).
        let reads = checkpointed ? 0 : min(keys, 200_000)
        var shuffler = SplitMix64(seed: options.seed &+ 1)
        let sample = (0..<reads).map { _ in Int(shuffler.next() % UInt64(keys)) }
        let snapshot = engine.snapshot()
        let readStart = ContinuousClock.now
        var readFound = 0
        for key in sample where try snapshot.withValue(forKey: Workload.key(key), { $0.withUnsafeBytes { Workload.touch($0) } }) != nil {
            readFound += 1
        }
        let readElapsed = readStart.duration(to: .now)
        try engine.close(checkpoint: false)
        guard readFound == reads else { throw BenchError(description: "\(workload) found \(readFound) of \(reads) replayed keys") }
        let expectedReplays = checkpointed ? 0 : (keys + options.batch - 1) / options.batch
        guard found, report.batchesReplayed == expectedReplays else {
            throw BenchError(description: "\(workload) replayed \(report.batchesReplayed) batches, not \(expectedReplays)")
        }
        if checkpointed {
            FileHandle.standardError.write(Data(("reopen: opened \(keys) checkpointed keys in "
                + "\(String(format: "%.1f", seconds * 1000)) ms; the log still held \(report.log.batchCount) checkpointed "
                + "batch(es), \(String(format: "%.1f", Double(report.log.storedBytes) / Double(1 << 20))) MiB stored\n").utf8))
            return Result(engine: self.engine, bench: workload, num: keys, batch: options.batch, valueSize: valueSize,
                          seconds: seconds, bytesOnDisk: directoryBytes(directory), fdatasyncs: nil)
        }
        let mebibytes = Double(report.log.rawBytes) / Double(1 << 20)
        FileHandle.standardError.write(Data(("recover: replayed \(String(format: "%.1f", mebibytes)) MiB of batches "
            + "(\(String(format: "%.1f", Double(report.log.storedBytes) / Double(1 << 20))) MiB stored) "
            + "at \(String(format: "%.0f", mebibytes / seconds)) MiB/s; then \(reads) point reads of replayed keys at "
            + "\(String(format: "%.0f", Double(reads) / (Double(readElapsed.components.attoseconds) / 1e18 + Double(readElapsed.components.seconds)))) reads/s\n").utf8))
        return Result(engine: self.engine, bench: workload, num: keys, batch: options.batch, valueSize: valueSize,
                      seconds: seconds, bytesOnDisk: directoryBytes(directory), fdatasyncs: nil)
    }

    func makeEngine(directory: String, keys: Int) throws -> any BenchEngine {
        switch engine {
        case "strata": try StrataEngineBench(directory: directory, durability: .full)
        case "strata-relaxed": try StrataEngineBench(directory: directory, durability: .relaxed)
        case "strata-lz4": try StrataEngineBench(directory: directory, durability: .full, leafCompression: .lz4)
        case "strata-small": try StrataEngineBench(directory: directory, engine: engine, durability: .full)
        case "sqlite": try SQLiteBench(directory: directory)
        case "lmdb": try LMDBBench(directory: directory)
        case "leveldb": try LSMBench(.leveldb, directory: directory)
        case "rocksdb": try LSMBench(.rocksdb, directory: directory)
        case "etcd": try EtcdBench(directory: directory, batch: options.batch, cluster: false)
        case "etcd-cluster": try EtcdBench(directory: directory, batch: options.batch, cluster: true)
        default: try FdatasyncBench(directory: directory, capacityBytes: keys * (16 + valueSize) + 4096,
                                    valueBytes: valueSize)
        }
    }

    /// Commits `keys` in transactions of `per` keys from `threads` threads (thread t takes
    /// transactions t, t + threads, …), recording each transaction's latency in `latencies`.
    private func commitAll(_ keys: [Int], per: Int, threads: Int, _ bench: any BenchEngine,
                           _ latencies: LatencyRecorder,
                           _ value: @escaping @Sendable (Int) -> [UInt8]?) throws {
        let failure = Mutex<String?>(nil)
        let group = DispatchGroup()
        for thread in 0..<threads {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var first = thread * per
                var histogram = Histogram<UInt64>.latencies()
                defer { latencies.add(histogram) }
                while first < keys.count {
                    let before = monotonicNanoseconds()
                    do { try bench.write(keys[first..<min(keys.count, first + per)], values: value) } catch {
                        failure.withLock { $0 = "\(error)" }
                        return
                    }
                    _ = histogram.record(monotonicNanoseconds() - before)
                    first += threads * per
                }
            }
        }
        group.wait()
        if let message = failure.withLock({ $0 }) { throw BenchError(description: "\(engine) \(workload): \(message)") }
    }

    func directoryBytes(_ path: String) -> Int { StrataBench.directoryBytes(path) }
}

extension StrataBench {
    /// The bytes of every file under `path` (0 when it does not exist).
    static func directoryBytes(_ path: String) -> Int {
        guard let names = try? FileManager.default.subpathsOfDirectory(atPath: path) else { return 0 }
        return names.reduce(0) { total, name in
            let attributes = try? FileManager.default.attributesOfItem(atPath: (path as NSString).appendingPathComponent(name))
            return total + ((attributes?[.size] as? NSNumber)?.intValue ?? 0)
        }
    }
}

extension Histogram<UInt64> {
    /// A histogram of nanoseconds up to ten minutes, sized once: one that starts small
    /// grows its counts on the first long value, through a generic path of ~36 million
    /// instructions (some 10 ms) inside the timed loop, for every engine alike.
    static func latencies() -> Histogram<UInt64> {
        Histogram(highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
    }
}

/// The latencies of one workload's operations, gathered from every thread that ran it.
final class LatencyRecorder: Sendable {
    let histogram = Mutex(Histogram<UInt64>.latencies())

    func add(_ other: Histogram<UInt64>) { histogram.withLock { $0.add(other) } }
}
