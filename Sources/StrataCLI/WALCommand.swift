// `strata wal [PATH]`: lists every batch of a store's write-ahead log (or of a log
// directory) and what recovery found, without changing anything.
import ArgumentParser
import StrataFileIO
import Foundation
import StrataWAL

struct WALCommand: ParsableCommand {
    /// One batch's line of `--json`.
    private struct BatchLine: Encodable {
        let lsn: UInt64
        let puts: Int
        let deletes: Int
        let rawBytes: Int
        let storedBytes: Int
        let frames: Int
        let offset: Int64
        let checksum: String
    }

    /// The closing line of `--json`: what recovery found.
    private struct ReportLine: Encodable {
        let segments: Int
        let batches: Int
        let frames: Int
        let firstLsn: UInt64
        let lastLsn: UInt64
        let rawBytes: Int
        let storedBytes: Int
        let damage: [String]
    }

    static let configuration = CommandConfiguration(
        commandName: "wal",
        abstract: "List the batches of a write-ahead log directory (read-only).")

    @Argument(help: "A store's directory (its wal/ is read) or a log directory.")
    var path = StorePath.defaultPath

    @Flag(help: "One JSON object per batch, then one for the report.")
    var json = false

    func run() throws {
        let storeLog = path + "/wal"
        let directory = FileManager.default.fileExists(atPath: storeLog) ? storeLog : path
        guard FileManager.default.fileExists(atPath: directory) else {
            printError("no log at \(path)")
            throw ExitCode.failure
        }
        let report: WALRecoveryReport
        do {
            report = try WriteAheadLog.read(directory: directory) { record in
                let puts = record.operationLocations.filter { $0.value != nil }.count
                let deletes = record.operationLocations.count - puts
                if json {
                    print(try jsonLine(BatchLine(lsn: record.lsn.rawValue, puts: puts, deletes: deletes,
                                                 rawBytes: record.rawBytes, storedBytes: record.storedBytes,
                                                 frames: record.frameCount, offset: record.offset, checksum: "ok")))
                } else {
                    print("\(record.lsn)  \(puts) puts, \(deletes) deletes  \(record.rawBytes) → \(record.storedBytes) bytes"
                          + "  \(record.frameCount) frame(s) at \((record.path as NSString).lastPathComponent):\(record.offset)")
                }
            }
        } catch {
            printError("\(error)")
            throw ExitCode.failure
        }
        let damage = report.damage.map(\.description)
        if json {
            print(try jsonLine(ReportLine(segments: report.segmentCount, batches: report.batchCount, frames: report.frameCount,
                                          firstLsn: report.firstLSN.rawValue, lastLsn: report.lastLSN.rawValue,
                                          rawBytes: report.rawBytes, storedBytes: report.storedBytes, damage: damage)))
        } else {
            print("\(report.batchCount) batches in \(report.segmentCount) segment(s), \(report.rawBytes) → \(report.storedBytes) bytes")
            for line in damage { print("damage: \(line)") }
        }
    }
}
