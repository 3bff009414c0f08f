// Fuzzes the record decoder: any bytes must decode or give a typed error, never a trap, a
// hang or a huge allocation; and whatever decodes re-encodes to a record that decodes and
// re-encodes to the same bytes (compared as bytes: a NaN field is not equal to itself).
import Contexts
import Foundation

struct FuzzRecord: Record {
    enum Kind: String, Codable { case a, b }
    struct Part: Codable {
        var name: String
        var weight: Double?
        var flags: [Bool]
    }

    var id: Int64
    var title: String
    var count: UInt32
    var kind: Kind?
    var parts: [Part]
    var blob: Data
    var nested: [[Int8]]
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let record = try? RecordDecoder().decode(FuzzRecord.self, from: bytes) else { return 0 }
    guard let again = try? RecordEncoder().encode(record) else { fatalError("a decoded record does not encode") }
    guard let decodedAgain = try? RecordDecoder().decode(FuzzRecord.self, from: again),
          (try? RecordEncoder().encode(decodedAgain)) == again else {
        fatalError("a decoded record does not round-trip")
    }
    return 0
}
