// `strata bench`: a quick Strata-only run of the core workloads on this machine (the
// comparison with SQLite and LMDB lives in Benchmarks/). Expectations: fillrandom and the
// reads are CPU-bound (hundreds of thousands of operations a second); fillsync is bounded
// by the disk's fdatasync rate.
import ArgumentParser
import Strata
import Foundation

struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench", abstract: "Time fillrandom, fillsync, readrandom and readseq on a scratch store.")

    @Option(help: "Keys to write and read.")
    var num = 100_000

    @Option(help: "Bytes per value.")
    var valueSize = 100

    @Option(help: "Directory for the scratch store (default: a temporary one, removed afterwards).")
    var directory: String?

    func run() throws {
        guard num > 0, valueSize >= 0 else { throw ValidationError("--num must be positive and --value-size not negative") }
        let path = directory ?? NSTemporaryDirectory() + "strata-bench-\(UUID().uuidString)"
        defer { if directory == nil { try? FileManager.default.removeItem(atPath: path) } }
        try withStore(path, create: true) { store in
            var random = SystemRandomNumberGenerator()
            let keys = (0..<num).map { index in Array(String(format: "%016d", index).utf8) }.shuffled(using: &random)
            let value = (0..<valueSize).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            print("workload     operations   seconds     ops/s")
            try report("fillrandom", num) { progress in
                for start in stride(from: 0, to: num, by: 1000) {
                    try store.write { unit in
                        for key in keys[start..<min(start + 1000, num)] { try unit.put(key, value) }
                    }
                    progress(start + 1000)
                }
            }
            let syncCount = min(num, 2_000)
            try report("fillsync", syncCount) { progress in
                for index in 0..<syncCount {
                    try store.write { unit in try unit.put(Array("sync-\(index)".utf8), value) }
                    if index % 100 == 0 { progress(index) }
                }
            }
            try report("readrandom", num) { progress in
                try store.read { context in
                    for (index, key) in keys.enumerated() {
                        guard try context.get(key) != nil else { throw ValidationError("key \(display(key)) missing") }
                        if index % 10_000 == 0 { progress(index) }
                    }
                }
            }
            try report("readseq", num + syncCount) { _ in
                let count = try store.read { try $0.scan().count }
                guard count == num + syncCount else { throw ValidationError("scan found \(count) keys") }
            }
        }
    }

    /// Runs `body` with a progress callback and prints its throughput.
    private func report(_ name: String, _ operations: Int, _ body: (_ progress: (Int) -> Void) throws -> Void) rethrows {
        var progress = ProgressReporter(label: name, total: operations)
        let clock = ContinuousClock()
        let elapsed = try clock.measure { try body { progress.update($0) } }
        progress.update(operations)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print(name.padding(toLength: 12, withPad: " ", startingAt: 0)
              + String(format: " %10d %9.3f %9.0f", operations, seconds, Double(operations) / seconds))
    }
}
