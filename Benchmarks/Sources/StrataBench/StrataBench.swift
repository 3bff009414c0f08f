// strata-bench: runs the workloads of Benchmarks/README.md on each engine, back to back on the
// same disk and data, and prints one JSON line per (engine, workload); `--table` adds a
// Markdown table with every engine's ratio to Strata. Progress goes to stderr.
//
// Expectations (back of the envelope): fillsync is bounded by the disk's fdatasync rate
// (strata ≥ 0.9 × `fdatasync`); fillsync-concurrent shares one fdatasync among waiting
// committers (≥ 5 × fillsync with 8 threads); batched fills are bounded by CPU (encoding,
// LZ4, the memtable) and reads by the page cache's decode cost.
import ArgumentParser
import CAffinity
import Foundation
import Strata
import Synchronization

@main
struct StrataBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "strata-bench",
        abstract: "Strata next to SQLite, LMDB, LevelDB, RocksDB and the disk's raw fdatasync rate, and Strata over etcd.")

    static let allEngines = ["strata", "strata-relaxed", "strata-lz4", "strata-small", "sqlite", "grdb", "lmdb", "leveldb", "rocksdb", "fdatasync",
                             "etcd", "etcd-cluster"]
    static let allWorkloads = ["fillseq", "fillrandom", "fillsync", "fillsync-concurrent", "overwrite", "readrandom",
                               "readseq", "deleterandom", "readwhilewriting", "nested", "recover", "reopen", "records-insert", "records-fetch",
                               "records-range", "records-count", "records-update", "records-relations", "records-sort-text",
                               "publish", "publish-baseline", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-e", "ycsb-f"]

    /// The engines a run takes when none are named: etcd only on request (it needs `etcd`
    /// installed, and its fills are slow enough to want a smaller --num). `etcd` is one
    /// member over plain HTTP; `etcd-cluster` three members with TLS (client certificates
    /// required) and authentication on. `strata-lz4` (Strata with
    /// `EngineOptions.leafCompression = .lz4`) and `strata-small` (Strata with
    /// `EngineOptions.smallFootprint`) also only when named.
    static let defaultEngines = allEngines.filter { !$0.hasPrefix("etcd") && $0 != "strata-lz4" && $0 != "strata-small" }
    /// The workloads whose reads or queries `--reads` counts.
    static let countsReads: Set<String> = ["readrandom", "records-range", "records-count"]

    @Option(help: "Comma-separated engines: \(allEngines.joined(separator: ", ")) (etcd and etcd-cluster only when named).")
    var engines = defaultEngines.joined(separator: ",")

    @Option(help: "Comma-separated workloads: \(allWorkloads.joined(separator: ", ")).")
    var benchmarks = allWorkloads.joined(separator: ",")

    @Option(help: "Keys per workload (default: 2,000 for the sync workloads and publish, 100,000 records for the records workloads, 1,000,000 otherwise).")
    var num: Int?

    @Option(help: "Keys per transaction for batched workloads.")
    var batch = 1_000

    @Option(name: .customLong("value-size"), help: "Value size in bytes (default: 1,000 for the ycsb workloads, 100 otherwise).")
    var valueSizeOption: Int?

    @Option(help: "Threads for fillsync-concurrent (default 8) and the ycsb workloads (default 1).")
    var threads: Int?

    @Option(help: "overwrite: overwrite random keys for this many seconds instead of N keys, reporting keys/s per 10-second interval. readwhilewriting with --interleave: pairs of phases for this many seconds.")
    var seconds: Int?

    @Option(help: "ycsb: operations after the load of --num records (default 100,000).")
    var operations = 100_000

    @Option(help: "readrandom: reads of random keys among the --num loaded (default: one read of each, in random order). records-range and records-count: queries (default --num / 100).")
    var reads: Int?

    @Option(help: "records-range, records-count, records-fetch, records-sort-text, records-relations (on strata, strata-small, sqlite), ycsb-c (on strata, strata-small, strata-lz4, lmdb, sqlite) and fillsync and fillsync-concurrent (on strata, strata-small, strata-lz4, fdatasync, sqlite, lmdb, leveldb, rocksdb): run every engine in one process, their queries, reads or one-key commits in turns of N, each engine's turns timed and summed, so that they share the machine's drift (no peak RSS); fillsync-concurrent also times one committer per engine in turns between its T committers'. readwhilewriting: the writer commits in phases of N keys, the readers reading in every other one, and reports its rate without them from the same run.")
    var interleave: Int?

    @Flag(inversion: .prefixedNo, help: "overwrite and deleterandom: start the timed workload, and its count of the device's writes, once the device has been quiet for 2 s after the untimed fill (at most 60 s), so that what the fill left running (Strata's checkpoint of its last memtable, an LSM's compactions) is not counted as the workload's.")
    var settle = true

    @Option(help: "readseq: scans of every key, one after another, the median one reported (default 1: the first scan alone, which meets every page for the first time, beside Strata's checkpoint of the fill's last keys).")
    var passes = 1

    @Option(help: "ycsb: how keys are picked, uniform, zipfian or latest (default: zipfian, latest for ycsb-d).")
    var distribution: YCSB.Distribution?

    @Option(help: "readwhilewriting: reader threads beside the writer.")
    var readers = 4

    @Option(help: "readwhilewriting: reader processes beside the writer as well (strata, strata-relaxed, strata-lz4, strata-small and sqlite).")
    var readerProcesses = 0

    @Flag(name: .customLong("split-cpus"), help: """
        readwhilewriting and its baseline: the writer's process on the first half of the CPUs, \
        the reader threads and processes on the other half (what readers cost a writer beyond \
        the CPU time they take from it).
        """)
    var splitCPUs = false

    @Flag(name: .customLong("touch-values"), help: """
        readrandom: each read also reads every byte of the value it finds (as an application \
        that uses the value does); without it, Strata and LMDB hand out a pointer and read no \
        byte of it.
        """)
    var touchValues = false

    @Option(name: .customLong("memtable-mib"),
            help: "Strata: the memtable's byte budget in MiB, at which a checkpoint starts (EngineOptions.checkpointMemtableBytes; default 64).")
    var memtableMiB: Int?

    @Option(name: .customLong("max-memtable-mib"),
            help: "Strata: the most MiB the memtable taking commits may hold while a checkpoint runs, commits waiting beyond it (EngineOptions.maxMemtableBytes; default: no bound).")
    var maxMemtableMiB: Int?

    @Option(name: .customLong("cache-mib"),
            help: "Strata: the page cache's byte budget in MiB (EngineOptions.cacheBytes; default 64).")
    var cacheMiB: Int?

    @Flag(help: "Strata: read the data file with pread through the page cache instead of a mapping (EngineOptions.mapsDataFile = false).")
    var unmapped = false

    @Option(name: .customLong("idle-checkpoint-ms"),
            help: "Strata: milliseconds a store waits after its last commit before it checkpoints its memtable (EngineOptions.idleCheckpointDelay; at least 10, or 0 for never; default 1,000).")
    var idleCheckpointMilliseconds: Int?

    /// The memory settings a child process or a reader process is given.
    var memoryArguments: [String] {
        var arguments: [String] = []
        if let memtableMiB { arguments += ["--memtable-mib", "\(memtableMiB)"] }
        if let maxMemtableMiB { arguments += ["--max-memtable-mib", "\(maxMemtableMiB)"] }
        if let cacheMiB { arguments += ["--cache-mib", "\(cacheMiB)"] }
        if unmapped { arguments.append("--unmapped") }
        if let idleCheckpointMilliseconds { arguments += ["--idle-checkpoint-ms", "\(idleCheckpointMilliseconds)"] }
        return arguments
    }

    /// Set for a reader process of `readwhilewriting`: the engine and the store to read.
    @Option(help: .hidden)
    var readProcess: String?
    @Option(help: .hidden)
    var readPath: String?

    @Option(help: "Directory for the data (a fresh subdirectory per run is made and removed).")
    var dir = NSTemporaryDirectory()

    @Option(help: "Seed for the values and the order of keys.")
    var seed: UInt64 = 301

    @Flag(help: "Also print a Markdown table with ratios to strata.")
    var table = false

    @Option(help: "Also write a grouped bar chart of the results to this SVG file.")
    var chart: String?

    @Flag(help: """
        Run every measurement in this process instead of one child process each (for a profiler; \
        peak RSS is then reported only when a single measurement is run).
        """)
    var inProcess = false

    /// Set by `runAlone` for the process it starts: run exactly the workload named.
    @Flag(help: .hidden)
    var child = false

    @Option(help: "Run nothing: read the JSON lines of an earlier run from this file and print its table and chart.")
    var replot: String?

    /// Rejects values no run can take, each with what to pass instead.
    func validate() throws {
        if let num, num < 1 { throw ValidationError("--num must be at least 1") }
        if batch < 1 { throw ValidationError("--batch must be at least 1") }
        if let valueSizeOption, !(0...(1 << 20)).contains(valueSizeOption) {
            throw ValidationError("--value-size must be 0 … 1,048,576 bytes (1 MiB)")
        }
        if let threads, threads < 1 { throw ValidationError("--threads must be at least 1") }
        if readers < 0 || readerProcesses < 0 { throw ValidationError("--readers and --reader-processes must be 0 or more") }
        if operations < 1 { throw ValidationError("--operations must be at least 1") }
        if let reads, reads < 1 { throw ValidationError("--reads must be at least 1") }
        if reads != nil, !benchmarks.split(separator: ",").contains(where: { Self.countsReads.contains(String($0)) }) {
            throw ValidationError("--reads counts the reads of readrandom and the queries of records-range and records-count only: add one of them to --benchmarks")
        }
        if passes < 1 { throw ValidationError("--passes must be at least 1") }
        if let interleave {
            guard interleave >= 1 else { throw ValidationError("--interleave must be at least 1") }
            let workloads = benchmarks.split(separator: ",").map(String.init)
            let engines = engines.split(separator: ",").map(String.init)
            let records = workloads.allSatisfy(RecordWorkloads.interleavable.contains)
                && engines.allSatisfy(RecordWorkloads.interleavableEngines.contains)
            let reads = workloads.allSatisfy(InterleavedReads.workloads.contains) && engines.allSatisfy(InterleavedReads.engines.contains)
            let commits = workloads.allSatisfy(InterleavedCommits.workloads.contains)
                && engines.allSatisfy(InterleavedCommits.engines.contains)
            guard records || reads || commits || workloads == ["readwhilewriting"] else {
                throw ValidationError("--interleave runs \(RecordWorkloads.interleavable.sorted().joined(separator: ", ")) on \(RecordWorkloads.interleavableEngines.sorted().joined(separator: ", ")), \(InterleavedReads.workloads.sorted().joined(separator: ", ")) on \(InterleavedReads.engines.sorted().joined(separator: ", ")), \(InterleavedCommits.workloads.sorted().joined(separator: ", ")) on \(InterleavedCommits.engines.sorted().joined(separator: ", ")), and readwhilewriting alone, only")
            }
        }
        if passes > 1, !benchmarks.split(separator: ",").contains("readseq") {
            throw ValidationError("--passes counts readseq's scans only: add readseq to --benchmarks")
        }
        if let seconds, seconds < 1 { throw ValidationError("--seconds must be at least 1") }
        if touchValues, !benchmarks.split(separator: ",").contains("readrandom") {
            throw ValidationError("--touch-values changes readrandom only: add readrandom to --benchmarks")
        }
        if let idleCheckpointMilliseconds, idleCheckpointMilliseconds < 0 || (1..<10).contains(idleCheckpointMilliseconds) {
            throw ValidationError("--idle-checkpoint-ms must be 0 (never) or at least 10")
        }
        if let memtableMiB, memtableMiB < 1 || memtableMiB > 1 << 20 { throw ValidationError("--memtable-mib must be 1 to 1,048,576") }
        // (Below the engine's checkpoint threshold, the store refuses it when it opens.)
        if let maxMemtableMiB, maxMemtableMiB < (memtableMiB ?? 1) || maxMemtableMiB > 1 << 20 {
            throw ValidationError("--max-memtable-mib must be at least --memtable-mib and at most 1,048,576")
        }
        if let cacheMiB, cacheMiB < 0 || cacheMiB > 1 << 20 { throw ValidationError("--cache-mib must be 0 to 1,048,576") }
        if seconds != nil, !benchmarks.split(separator: ",").contains("overwrite"), !(interleave != nil && benchmarks == "readwhilewriting") {
            throw ValidationError("--seconds times overwrite, and readwhilewriting with --interleave, only: add one of them to --benchmarks")
        }
    }

    /// The value size of `workload`: `--value-size`, else its default.
    func valueSize(for workload: String) -> Int { valueSizeOption ?? (workload.hasPrefix("ycsb-") ? 1_000 : 100) }

    func run() throws {
        Workload.touchValues.store(touchValues, ordering: .relaxed)
        Workload.memory.withLock {
            $0 = Workload.Memory(memtableBytes: memtableMiB.map { $0 << 20 }, maxMemtableBytes: maxMemtableMiB.map { $0 << 20 },
                                 cacheBytes: cacheMiB.map { $0 << 20 },
                                 mapsDataFile: !unmapped,
                                 idleCheckpointDelay: idleCheckpointMilliseconds.map { $0 == 0 ? nil : .milliseconds($0) })
        }
        // A reader process that ended early closes the pipe readwhilewriting writes its
        // commands to: an error to report, not a signal that ends this process.
        signal(SIGPIPE, SIG_IGN)
        if splitCPUs { CPUSplit.pin(readers: readProcess != nil) }
        if let readProcess, let readPath {
            try ReadProcess(engine: readProcess, path: readPath, keys: num ?? 1_000_000, seed: seed).run()
            return
        }
        let engineNames = engines.split(separator: ",").map(String.init)
        let workloadNames = benchmarks.split(separator: ",").map(String.init)
        if let replot {
            let lines = try String(contentsOfFile: replot, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("{") }
            let results = try lines.map { try Result(jsonLine: String($0)) }
            let engines = engineNames.filter { name in results.contains { $0.engine == name } }
            let workloads = workloadNames.filter { name in results.contains { $0.bench == name } }
            printTable(results, engines: engines, workloads: workloads)
            if let chart { try BarChart(results: results, engines: engines, workloads: workloads).svg.write(toFile: chart, atomically: true, encoding: .utf8) }
            return
        }
        for name in engineNames where !Self.allEngines.contains(name) { throw ValidationError("unknown engine \(name)") }
        for name in workloadNames where !Self.allWorkloads.contains(name) { throw ValidationError("unknown workload \(name)") }
        var plan: [(engine: String, workload: String)] = []
        // `publish` is measured against its baseline in the same run.
        let planned = workloadNames.flatMap { name in
            name == "publish" && !child && !workloadNames.contains("publish-baseline") ? ["publish-baseline", name] : [name]
        }
        for workload in planned {
            for engine in engineNames {
                let writesOnly = ["fillseq", "fillrandom", "fillsync", "fillsync-concurrent", "overwrite", "deleterandom"]
                if engine == "fdatasync" && !writesOnly.contains(workload) { continue }
                // Over etcd: the commit path (one transaction per commit) and the replica's reads.
                if engine.hasPrefix("etcd") && !["fillsync", "fillsync-concurrent", "fillrandom", "readrandom"].contains(workload) {
                    continue
                }
                // (`nested` needs transactions inside transactions, which the LSM engines lack.)
                if workload == "nested" && (engine == "leveldb" || engine == "rocksdb") { continue }
                // (Recovery replays into a memtable no checkpoint empties: the footprint's
                // bounds do not apply to it.)
                if (workload == "recover" || workload == "reopen") && (!engine.hasPrefix("strata") || engine == "strata-small") {
                    continue
                }
                if workload == "readwhilewriting" && ["fdatasync", "etcd", "etcd-cluster"].contains(engine) { continue }
                if workload.hasPrefix("publish") && engine != "strata" { continue }
                if workload.hasPrefix("ycsb-") && ["fdatasync", "etcd", "etcd-cluster"].contains(engine) { continue }
                // The record workloads compare Strata's repositories (also in a small
                // footprint) with an indexed SQLite table and with GRDB's records on it; GRDB
                // runs nothing else.
                if workload.hasPrefix("records-") ? !["strata", "strata-small", "sqlite", "grdb"].contains(engine) : engine == "grdb" {
                    continue
                }
                plan.append((engine, workload))
            }
        }
        var results: [Result] = []
        // (readwhilewriting's phases run in the process of each engine, as without them.)
        if let interleave, planned != ["readwhilewriting"] {
            for workload in planned {
                let row = !inProcess
                    ? try runAlone(engines: engineNames, workload: workload)
                    : InterleavedReads.workloads.contains(workload)
                    ? try InterleavedReads.run(engines: engineNames, workload: workload, slice: interleave, options: self)
                    : InterleavedCommits.workloads.contains(workload)
                    ? try InterleavedCommits.run(engines: engineNames, workload: workload, slice: interleave, options: self)
                    : try RecordWorkloads.interleaved(engines: engineNames, workload: workload, slice: interleave, options: self)
                for result in row { print(try result.json) }
                results += row
            }
            plan = []
        }
        for (engine, workload) in plan {
            var result: Result
            if inProcess {
                FileHandle.standardError.write(Data("running \(engine) \(workload)…\n".utf8))
                result = workload.hasPrefix("records-")
                    ? try RecordWorkloads(engine: engine, workload: workload, options: self).run()
                    : workload.hasPrefix("publish")
                    ? try OutboxWorkloads(workload: workload, options: self).run()
                    : try Runner(engine: engine, workload: workload, options: self).run()
                // A process's peak is its own only while it has run one measurement.
                if plan.count == 1 { result.peakRSSKilobytes = peakResidentKilobytes() }
            } else {
                result = try runAlone(engine: engine, workload: workload)
            }
            print(try result.json)
            results.append(result)
        }
        if table { printTable(results, engines: engineNames, workloads: planned) }
        if let chart {
            let svg = BarChart(results: results, engines: engineNames, workloads: planned).svg
            try svg.write(toFile: chart, atomically: true, encoding: .utf8)
            FileHandle.standardError.write(Data("wrote \(chart)\n".utf8))
        }
    }

    /// Runs one measurement in a child process of this executable, so that its peak
    /// resident set is its own and no engine runs on a heap another one left behind.
    private func runAlone(engine: String, workload: String) throws -> Result {
        try runAlone(engines: [engine], workload: workload)[0]
    }

    /// `runAlone` of one or (`--interleave`) several engines, a result each.
    private func runAlone(engines: [String], workload: String) throws -> [Result] {
        let engine = engines.joined(separator: ",")
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var arguments = ["--in-process", "--child", "--engines", engine, "--benchmarks", workload, "--batch", "\(batch)",
                         "--readers", "\(readers)", "--reader-processes", "\(readerProcesses)", "--dir", dir, "--seed", "\(seed)",
                         "--operations", "\(operations)"]
        if let num { arguments += ["--num", "\(num)"] }
        if let valueSizeOption { arguments += ["--value-size", "\(valueSizeOption)"] }
        if let threads { arguments += ["--threads", "\(threads)"] }
        if let distribution { arguments += ["--distribution", distribution.rawValue] }
        if let seconds, workload == "overwrite" || (workload == "readwhilewriting" && interleave != nil) {
            arguments += ["--seconds", "\(seconds)"]
        }
        if let reads, Self.countsReads.contains(workload) { arguments += ["--reads", "\(reads)"] }
        if workload == "readseq" { arguments += ["--passes", "\(passes)"] }
        if !settle { arguments.append("--no-settle") }
        if let interleave { arguments += ["--interleave", "\(interleave)"] }
        if splitCPUs { arguments.append("--split-cpus") }
        // Only the readrandom child reads values; the others refuse the option.
        if touchValues, workload == "readrandom" { arguments.append("--touch-values") }
        arguments += memoryArguments
        child.arguments = arguments
        let output = Pipe()
        child.standardOutput = output
        try child.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        child.waitUntilExit()
        let lines = String(decoding: printed, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("{") }
        guard child.terminationStatus == 0 else {
            throw BenchError(description: "\(engine) \(workload): its process ended with status \(child.terminationStatus)")
        }
        guard lines.count == engines.count else {
            throw BenchError(description: "\(engine) \(workload): its process printed \(lines.count) results for \(engines.count) engines")
        }
        return try lines.map { try Result(jsonLine: String($0)) }
    }

    /// A table of one row: for each engine whose result of `workload` has a rate (`rates`
    /// gives it, nil for none), the rate and, when there is one, the rate it is set beside
    /// in the same run and their ratio.
    private func printBeside(_ results: [Result], engines: [String], workload: String, title: String,
                             _ rates: (Result) -> (rate: Double, beside: Double?)?) {
        let rows = results.filter { $0.bench == workload && rates($0) != nil }
        guard !rows.isEmpty else { return }
        print("\n| \(title) | " + engines.joined(separator: " | ") + " |")
        print("|---|" + engines.map { _ in "---:|" }.joined())
        let cells = engines.map { engine -> String in
            guard let result = rows.first(where: { $0.engine == engine }), let (rate, beside) = rates(result) else { return "" }
            guard let beside else { return "\(Int(rate))" }
            return "\(Int(rate)) (\(Int(beside)); \(String(format: "%.2f", rate / beside))×)"
        }
        print("| \(workload) | " + cells.joined(separator: " | ") + " |")
    }

    private func printTable(_ results: [Result], engines: [String], workloads: [String]) {
        print("\n| workload | " + engines.joined(separator: " | ") + " |")
        print("|---|" + engines.map { _ in "---:|" }.joined())
        for workload in workloads {
            let row = results.filter { $0.bench == workload }
            let strata = row.first { $0.engine == "strata" }?.opsPerSecond
            let cells = engines.map { engine -> String in
                guard let result = row.first(where: { $0.engine == engine }) else { return "" }
                let ratio = strata.map { " (\(String(format: "%.2f", result.opsPerSecond / $0))×)" } ?? ""
                return "\(Int(result.opsPerSecond)) ops/s" + ratio
            }
            print("| \(workload) | " + cells.joined(separator: " | ") + " |")
        }
        // readwhilewriting: the writer's keys/s beside the readers, and (`--interleave`)
        // without them in the same run, with the ratio of the two.
        printBeside(results, engines: engines, workload: "readwhilewriting",
                    title: "writer keys/s with readers (without; ratio)") { result in
            result.writesPerSecond.map { ($0, result.writesAlonePerSecond) }
        }
        // fillsync-concurrent --interleave: T committers' commits a second, one committer's
        // in turns with them, and the ratio of the two.
        printBeside(results, engines: engines, workload: "fillsync-concurrent",
                    title: "commits/s of \(threads ?? 8) committers (one committer; ratio)") { result in
            result.oneCommitterPerSecond.map { (result.opsPerSecond, $0) }
        }
        // Latency per transaction (writes) or read: p50 / p99 / p99.9 / max, in µs.
        let timed = workloads.filter { workload in results.contains { $0.bench == workload && $0.latency != nil } }
        if !timed.isEmpty {
            print("\n| latency µs (p50 / p99 / p99.9 / max) | " + engines.joined(separator: " | ") + " |")
            print("|---|" + engines.map { _ in "---:|" }.joined())
            for workload in timed {
                let cells = engines.map { engine in
                    results.first { $0.bench == workload && $0.engine == engine }?.latency?.text ?? ""
                }
                print("| \(workload) | " + cells.joined(separator: " | ") + " |")
            }
        }
        // Write amplification (device bytes ÷ bytes written) and space amplification (bytes
        // on disk ÷ bytes held), where measured.
        for (title, value) in [("write amplification", \Result.writeAmplification), ("space amplification", \Result.spaceAmplification)] {
            let rows = workloads.filter { workload in results.contains { $0.bench == workload && $0[keyPath: value] != nil } }
            guard !rows.isEmpty else { continue }
            print("\n| \(title) | " + engines.joined(separator: " | ") + " |")
            print("|---|" + engines.map { _ in "---:|" }.joined())
            for workload in rows {
                let cells = engines.map { engine in
                    results.first { $0.bench == workload && $0.engine == engine }?[keyPath: value].map { String(format: "%.2f", $0) } ?? ""
                }
                print("| \(workload) | " + cells.joined(separator: " | ") + " |")
            }
        }
        // Bytes on disk after the workload (its store closed), in MB, with the ratio to Strata's.
        printMegabytes("MB on disk", results, engines: engines, workloads: workloads) { $0.bytesOnDisk > 0 ? Double($0.bytesOnDisk) / 1e6 : nil }
        // `overwrite --seconds`: keys/s in each 10-second interval, per engine.
        for result in results {
            guard let intervals = result.intervals else { continue }
            print("\n\(result.engine) \(result.bench), keys/s per 10 s: " + intervals.map(String.init).joined(separator: ", "))
        }
        // Peak resident set of each measurement's process, in MB, with its ratio to Strata's.
        printMegabytes("peak RSS MB", results, engines: engines, workloads: workloads) { $0.peakRSSKilobytes.map { Double($0) * 1.024 / 1000 } }
    }

    /// A table of `title` (rows: workloads; columns: engines) of `megabytes` of each result
    /// that has them, with the ratio to Strata's; nothing when no result has them.
    private func printMegabytes(_ title: String, _ results: [Result], engines: [String], workloads: [String],
                                _ megabytes: (Result) -> Double?) {
        let rows = workloads.filter { workload in results.contains { $0.bench == workload && megabytes($0) != nil } }
        guard !rows.isEmpty else { return }
        print("\n| \(title) | " + engines.joined(separator: " | ") + " |")
        print("|---|" + engines.map { _ in "---:|" }.joined())
        for workload in rows {
            let row = results.filter { $0.bench == workload }
            let strata = row.first { $0.engine == "strata" }.flatMap(megabytes)
            let cells = engines.map { engine -> String in
                guard let value = row.first(where: { $0.engine == engine }).flatMap(megabytes) else { return "" }
                let ratio = strata.map { " (\(String(format: "%.2f", value / $0))×)" } ?? ""
                return String(format: "%.1f", value) + ratio
            }
            print("| \(workload) | " + cells.joined(separator: " | ") + " |")
        }
    }
}

/// `--split-cpus`: the CPUs of this machine in two halves, the writer's and the readers'.
enum CPUSplit {
    /// Pins the calling thread (and the threads it starts from now on) to the readers' half
    /// or the writer's.
    static func pin(readers: Bool) {
        let count = ProcessInfo.processInfo.activeProcessorCount
        guard count >= 2 else { return }
        let half = readers ? (count / 2)..<count : 0..<(count / 2)
        let failed = strata_bench_pin_cpus(Int32(half.lowerBound), Int32(half.count))
        if failed != 0 { FileHandle.standardError.write(Data("strata-bench: sched_setaffinity failed (errno \(failed))\n".utf8)) }
    }
}
