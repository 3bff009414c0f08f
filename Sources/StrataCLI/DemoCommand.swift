// `strata demo`: appends batches to a write-ahead log in a fresh directory with group
// commit, closes it, reopens it, checks that recovery replays exactly what was appended,
// and prints what happened at each step.
import ArgumentParser
import StrataFileIO
import Foundation
import Synchronization
import StrataWAL

struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Append batches to a write-ahead log, reopen it, and verify the replay.")

    @Option(help: "Directory for the log (default: a new temporary directory, removed afterwards).")
    var directory: String?

    @Option(help: "Batches to append.")
    var commits = 2_000

    @Option(help: "Threads appending at once (they share fdatasyncs through group commit).")
    var threads = 4

    @Option(help: "Durability: full (fdatasync before returning) or relaxed.")
    var durability = "full"

    func run() throws {
        guard commits > 0, threads > 0 else { throw ValidationError("--commits and --threads must be positive") }
        guard durability == "full" || durability == "relaxed" else {
            throw ValidationError("--durability must be full or relaxed")
        }
        let path = directory ?? NSTemporaryDirectory() + "strata-demo-\(UUID().uuidString)"
        defer { if directory == nil { try? FileManager.default.removeItem(atPath: path) } }
        let options = WALOptions(durability: durability == "full" ? .full : .relaxed)

        print("Opening a write-ahead log in \(path)")
        let (log, openReport) = try WriteAheadLog.open(directory: path, options: options)
        print("  recovered \(openReport.batchCount) batches from \(openReport.segmentCount) segment(s)")

        let appended = Mutex<[LSN: WALBatch]>([:])
        let start = ContinuousClock.now
        let failures = Mutex<[String]>([])
        let group = DispatchGroup()
        for thread in 0..<threads {
            group.enter()
            Thread.detachNewThread { [commits, threads] in
                defer { group.leave() }
                var random = SplitMix64(seed: UInt64(thread))
                for index in stride(from: thread, to: commits, by: threads) {
                    let batch = Self.sampleBatch(index: index, random: &random)
                    do {
                        let lsn = try log.append(batch)
                        appended.withLock { $0[lsn] = batch }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                        return
                    }
                }
            }
        }
        group.wait()
        let elapsed = start.duration(to: .now)
        if let failure = failures.withLock({ $0.first }) { throw ValidationError("append failed: \(failure)") }
        let statistics = log.statistics
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("Appended \(commits) batches from \(threads) threads in \(format(seconds)) s "
              + "(\(Int(Double(commits) / seconds)) commits/s, durability \(durability))")
        print("  \(statistics.groupCount) group commits, \(statistics.syncCount) fdatasyncs, largest group \(statistics.largestGroup)")
        print("  \(statistics.rawBytes) encoded bytes stored as \(statistics.storedBytes) (LZ4 ratio \(format(statistics.compressionRatio)))")
        try log.close()

        print("Reopening: recovery replays the log")
        var replayed: [WALRecord] = []
        let (reopened, report) = try WriteAheadLog.open(directory: path, options: options) { replayed.append($0) }
        defer { try? reopened.close() }
        let expected = appended.withLock { $0 }
        let mismatches = replayed.filter { expected[$0.lsn] != $0.batch }.count
        guard replayed.count == expected.count, mismatches == 0 else {
            throw ValidationError("replay returned \(replayed.count) batches, \(mismatches) of them different from what was appended")
        }
        print("  replayed \(report.batchCount) batches (\(report.firstLSN) to \(report.lastLSN)), "
              + "\(report.frameCount) frames, all equal to what was appended")
        print("  segments: " + reopened.segmentPaths.map { ($0 as NSString).lastPathComponent }.joined(separator: ", "))
    }

    /// A batch of one to four puts with 16-byte keys and 100-byte values, half random and
    /// half repeated bytes (the value shape of Benchmarks/README.md).
    static func sampleBatch(index: Int, random: inout SplitMix64) -> WALBatch {
        var batch = WALBatch()
        for part in 0..<(index % 4 + 1) {
            let key = Array(String(format: "%016d", index * 4 + part).utf8)
            let randomHalf = (0..<50).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            batch.put(key, randomHalf + [UInt8](repeating: UInt8(truncatingIfNeeded: random.next()), count: 50))
        }
        return batch
    }
}

func format(_ value: Double) -> String { String(format: "%.2f", value) }
