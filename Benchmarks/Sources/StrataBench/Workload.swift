// The data of Benchmarks/README.md: 16-byte keys (the key number, zero-padded decimal) and values
// of V bytes, half random and half one repeated byte, so a good compressor halves them.
import Foundation
import Strata
import StrataTesting

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

/// One measurement, printed as one JSON line (Benchmarks/README.md, "Output").
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

    /// The line, made by `JSONEncoder`.
    var json: String {
        get throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return String(decoding: try encoder.encode(self), as: UTF8.self)
        }
    }
}

extension Result: Codable {
    enum CodingKeys: String, CodingKey {
        case engine, bench, num, batch, valueSize = "value_size", seconds, opsPerSecond = "ops_per_sec"
        case bytesOnDisk = "bytes_on_disk", fdatasyncs
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(engine, forKey: .engine)
        try container.encode(bench, forKey: .bench)
        try container.encode(num, forKey: .num)
        try container.encode(batch, forKey: .batch)
        try container.encode(valueSize, forKey: .valueSize)
        try container.encode(rounded(seconds, 4), forKey: .seconds)
        try container.encode(Int(opsPerSecond), forKey: .opsPerSecond)
        try container.encode(bytesOnDisk, forKey: .bytesOnDisk)
        try container.encode(fdatasyncs, forKey: .fdatasyncs)
    }

    /// Reads back one line of `json` (the ops/s figure is derived, so it is not read).
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(engine: try container.decode(String.self, forKey: .engine),
                  bench: try container.decode(String.self, forKey: .bench),
                  num: try container.decode(Int.self, forKey: .num),
                  batch: try container.decode(Int.self, forKey: .batch),
                  valueSize: try container.decode(Int.self, forKey: .valueSize),
                  seconds: try container.decode(Double.self, forKey: .seconds),
                  bytesOnDisk: try container.decode(Int.self, forKey: .bytesOnDisk),
                  fdatasyncs: try container.decodeIfPresent(Int.self, forKey: .fdatasyncs))
    }

    init(jsonLine: String) throws {
        self = try JSONDecoder().decode(Result.self, from: Data(jsonLine.utf8))
    }
}

func rounded(_ value: Double, _ places: Int) -> Double {
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    return (value * scale).rounded() / scale
}
