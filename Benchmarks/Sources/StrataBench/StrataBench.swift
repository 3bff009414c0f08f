// strata-bench: runs the workloads of BENCHMARKS.md on each engine, back to back on the
// same disk, and prints one JSON line per (engine, workload); `--table` adds a Markdown
// table with every engine's ratio to Strata.
//
// Expectations (back of the envelope): fillsync is bounded by the disk's fdatasync rate,
// so strata-wal should reach ≥ 0.9 × the `fdatasync` engine; fillsync-concurrent shares
// one fdatasync among the appenders waiting, so ≥ 5 × fillsync with 8 threads; LZ4 on
// half-random values should store ≤ 0.6 of the encoded bytes.
import ArgumentParser
import FileIO
import Foundation
import Synchronization
import WAL

@main
struct StrataBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "strata-bench",
        abstract: "Throughput of Strata's commit path next to the disk's raw fdatasync rate.")

    @Option(help: "Comma-separated engines: strata-wal, strata-wal-relaxed, fdatasync.")
    var engines = "strata-wal,strata-wal-relaxed,fdatasync"

    @Option(help: "Comma-separated workloads: fillsync, fillsync-concurrent, fillseq.")
    var benchmarks = "fillsync,fillsync-concurrent,fillseq"

    @Option(help: "Keys per workload (default: 2,000 for the sync workloads, 1,000,000 for fillseq).")
    var num: Int?

    @Option(help: "Keys per transaction for batched workloads.")
    var batch = 1_000

    @Option(help: "Value size in bytes.")
    var valueSize = 100

    @Option(help: "Threads for the concurrent workload.")
    var threads = 8

    @Option(help: "Directory for the data (a fresh subdirectory per run is made and removed).")
    var dir = NSTemporaryDirectory()

    @Option(help: "Seed for the values and the order of keys.")
    var seed: UInt64 = 301

    @Flag(help: "Also print a Markdown table with ratios to strata-wal.")
    var table = false

    func run() throws {
        let engineNames = engines.split(separator: ",").map(String.init)
        let workloadNames = benchmarks.split(separator: ",").map(String.init)
        for name in engineNames where !["strata-wal", "strata-wal-relaxed", "fdatasync"].contains(name) {
            throw ValidationError("unknown engine \(name)")
        }
        for name in workloadNames where !["fillsync", "fillsync-concurrent", "fillseq"].contains(name) {
            throw ValidationError("unknown workload \(name)")
        }
        var results: [Result] = []
        for workload in workloadNames {
            for engine in engineNames {
                FileHandle.standardError.write(Data("running \(engine) \(workload)…\n".utf8))
                let result = try measure(engine: engine, workload: workload)
                print(result.json)
                results.append(result)
            }
        }
        if table { printTable(results, engines: engineNames, workloads: workloadNames) }
    }

    private func measure(engine name: String, workload: String) throws -> Result {
        let keys = num ?? (workload == "fillseq" ? 1_000_000 : 2_000)
        let perTransaction = workload == "fillseq" ? batch : 1
        let workers = workload == "fillsync-concurrent" ? threads : 1
        let directory = (dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let engine: any Engine = switch name {
        case "fdatasync": try FdatasyncEngine(directory: directory, capacityBytes: keys * (16 + valueSize) + 4096)
        case "strata-wal-relaxed": try WALEngine(directory: directory, durability: .relaxed)
        default: try WALEngine(directory: directory, durability: .full)
        }
        var random = SplitMix64(seed: seed)
        let values = (0..<min(keys, 10_000)).map { _ in Workload.value(valueSize, random: &random) }
        let failure = Mutex<String?>(nil)
        let start = ContinuousClock.now
        let group = DispatchGroup()
        for worker in 0..<workers {
            group.enter()
            Thread.detachNewThread { [perTransaction, workers] in
                defer { group.leave() }
                // Worker w commits transactions w, w + workers, w + 2·workers, …
                var first = worker * perTransaction
                while first < keys {
                    let range = first..<min(keys, first + perTransaction)
                    let slice = range.map { values[$0 % values.count] }
                    do { try engine.commit(range, values: slice) } catch {
                        failure.withLock { $0 = "\(error)" }
                        return
                    }
                    first += workers * perTransaction
                }
            }
        }
        group.wait()
        let elapsed = start.duration(to: .now)
        if let message = failure.withLock({ $0 }) { throw ValidationError("\(name) \(workload) failed: \(message)") }
        let (bytes, syncs, ratio) = try engine.finish()
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Result(engine: name, bench: workload, num: keys, batch: perTransaction, valueSize: valueSize,
                      seconds: seconds, bytesOnDisk: bytes, fdatasyncs: syncs, compressionRatio: ratio)
    }

    private func printTable(_ results: [Result], engines: [String], workloads: [String]) {
        print("\n| workload | " + engines.joined(separator: " | ") + " |")
        print("|---|" + engines.map { _ in "---:|" }.joined())
        for workload in workloads {
            let row = results.filter { $0.bench == workload }
            let strata = row.first { $0.engine == "strata-wal" }?.opsPerSecond
            let cells = engines.map { engine -> String in
                guard let result = row.first(where: { $0.engine == engine }) else { return "" }
                let ratio = strata.map { " (\(String(format: "%.2f", result.opsPerSecond / $0))×)" } ?? ""
                return "\(Int(result.opsPerSecond)) ops/s" + ratio
            }
            print("| \(workload) | " + cells.joined(separator: " | ") + " |")
        }
    }
}
