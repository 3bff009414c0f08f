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

    /// The line of `--json` for a batch whose frames verify but whose bytes do not decode.
    private struct DamagedLine: Encodable {
        let lsn: UInt64
        let offset: Int64
        let file: String
        let damaged: String
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
                var puts = 0
                record.forEachOperation { _, _, value in puts += value == nil ? 0 : 1 }
                let deletes = record.operationCount - puts
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
            if case let WALError.corruptBatch(path, offset, lsn, reason) = error {
                // Its frames verify but its bytes do not decode: listed in its place, marked.
                if json {
                    print(try jsonLine(DamagedLine(lsn: lsn.rawValue, offset: offset, file: path, damaged: reason)))
                } else {
                    print("\(lsn)  DAMAGED: \(reason)  at \((path as NSString).lastPathComponent):\(offset)")
                }
            }
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
