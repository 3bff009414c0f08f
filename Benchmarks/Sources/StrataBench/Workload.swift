// The data of BENCHMARKS.md: 16-byte keys (the key number, zero-padded decimal) and values
// of V bytes, half random and half one repeated byte, so a good compressor halves them.
import Foundation
import Strata

enum Workload {
    static func key(_ number: Int) -> [UInt8] {
        let digits = Array(String(number).utf8)
        return [UInt8](repeating: UInt8(ascii: "0"), count: max(0, 16 - digits.count)) + digits
    }

    static func value(_ bytes: Int, random: inout SplitMix64) -> [UInt8] {
        let half = bytes / 2
        let randomHalf = (0..<half).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        return randomHalf + [UInt8](repeating: UInt8(truncatingIfNeeded: random.next()), count: bytes - half)
    }
}

/// One measurement, printed as one JSON line.
struct Result {
    var engine: String
    var bench: String
    var num: Int
    var batch: Int
    var valueSize: Int
    var seconds: Double
    var bytesOnDisk: Int
    var fdatasyncs: Int?

    var opsPerSecond: Double { Double(num) / seconds }

    var json: String {
        #"{"engine":"\#(engine)","bench":"\#(bench)","num":\#(num),"batch":\#(batch),"value_size":\#(valueSize),"#
            + #""seconds":\#(rounded(seconds, 4)),"ops_per_sec":\#(Int(opsPerSecond)),"bytes_on_disk":\#(bytesOnDisk),"#
            + #""fdatasyncs":\#(fdatasyncs.map(String.init) ?? "null")}"#
    }
}

extension Result {
    /// Reads back one line of `json`.
    init(jsonLine: String) throws {
        struct Line: Decodable {
            var engine: String
            var bench: String
            var num: Int
            var batch: Int
            var value_size: Int
            var seconds: Double
            var bytes_on_disk: Int
            var fdatasyncs: Int?
        }
        let line = try JSONDecoder().decode(Line.self, from: Data(jsonLine.utf8))
        self.init(engine: line.engine, bench: line.bench, num: line.num, batch: line.batch, valueSize: line.value_size,
                  seconds: line.seconds, bytesOnDisk: line.bytes_on_disk, fdatasyncs: line.fdatasyncs)
    }
}

func rounded(_ value: Double, _ places: Int) -> Double {
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    return (value * scale).rounded() / scale
}
