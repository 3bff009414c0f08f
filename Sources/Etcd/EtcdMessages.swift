// The messages of etcd v3's JSON gateway that StrataEtcd sends and reads: the JSON
// mapping of etcd's `rpc.proto` (KV.Range, KV.Txn, Watch.Watch). Keys and values are
// base64; 64-bit integers arrive as strings; fields at their default value are left out,
// so every field is optional here and defaults are applied by the readers.
import Foundation

/// An int64 of the gateway: a JSON string ("42"), or a number.
struct EtcdInt: Codable, Sendable, Equatable {
    let value: Int64

    init(_ value: Int64) { self.value = value }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self), let value = Int64(text) {
            self.value = value
        } else {
            value = try container.decode(Int64.self)
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(String(value))
    }
}

/// Bytes as base64, both ways.
struct EtcdBytes: Codable, Sendable, Equatable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let data = Data(base64Encoded: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not base64"))
        }
        bytes = [UInt8](data)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Data(bytes).base64EncodedString())
    }
}

struct ResponseHeader: Decodable, Sendable {
    var revision: EtcdInt?
    var cluster_id: EtcdID?
}

/// A uint64 id of the gateway (a JSON string, or a number), kept as its decimal text.
struct EtcdID: Decodable, Sendable, Equatable {
    let text: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) { self.text = text } else { text = String(try container.decode(UInt64.self)) }
    }
}

struct KeyValue: Decodable, Sendable {
    var key: EtcdBytes
    var value: EtcdBytes?
    var create_revision: EtcdInt?
    var mod_revision: EtcdInt?
    var version: EtcdInt?
}

struct RangeRequest: Encodable {
    var key: EtcdBytes
    var range_end: EtcdBytes?
    var limit: EtcdInt?
    var revision: EtcdInt?
    var keys_only: Bool?
}

struct RangeResponse: Decodable, Sendable {
    var header: ResponseHeader?
    var kvs: [KeyValue]?
    var more: Bool?
}

struct Compare: Encodable {
    enum Result: String, Encodable { case EQUAL, GREATER, LESS }
    var key: EtcdBytes
    /// With an end, the compare holds for every key in `key..<range_end`.
    var range_end: EtcdBytes?
    var target = "MOD"
    var result: Result
    var mod_revision: EtcdInt

    init(key: EtcdBytes, range_end: EtcdBytes? = nil, result: Result, mod_revision: EtcdInt) {
        self.key = key
        self.range_end = range_end
        self.result = result
        self.mod_revision = mod_revision
    }
}

struct PutRequest: Encodable {
    var key: EtcdBytes
    var value: EtcdBytes
}

struct DeleteRangeRequest: Encodable {
    var key: EtcdBytes
}

struct RequestOp: Encodable {
    var request_put: PutRequest?
    var request_delete_range: DeleteRangeRequest?
    var request_range: RangeRequest?
}

struct TxnRequest: Encodable {
    var compare: [Compare]
    var success: [RequestOp]
    var failure: [RequestOp]
}

struct ResponseOp: Decodable, Sendable {
    var response_range: RangeResponse?
    var response_delete_range: DeleteRangeResponse?
}

struct DeleteRangeResponse: Decodable, Sendable {
    /// How many keys the delete removed (absent when none).
    var deleted: EtcdInt?
}

struct TxnResponse: Decodable, Sendable {
    var header: ResponseHeader?
    var succeeded: Bool?
    var responses: [ResponseOp]?
}

struct WatchCreateRequest: Encodable {
    var key: EtcdBytes
    var range_end: EtcdBytes
    var start_revision: EtcdInt
}

struct WatchRequest: Encodable {
    var create_request: WatchCreateRequest
}

struct WatchEvent: Decodable, Sendable {
    /// "PUT" is the default and left out; "DELETE" is written.
    var type: String?
    var kv: KeyValue
}

struct WatchResponse: Decodable, Sendable {
    var header: ResponseHeader?
    var created: Bool?
    var canceled: Bool?
    var compact_revision: EtcdInt?
    var cancel_reason: String?
    var events: [WatchEvent]?
}

struct AuthenticateRequest: Encodable {
    var name: String
    var password: String
}

struct AuthenticateResponse: Decodable, Sendable {
    var token: String?
}

struct CompactionRequest: Encodable {
    var revision: EtcdInt
}

struct CompactionResponse: Decodable, Sendable {
    var header: ResponseHeader?
}

/// One line of the watch stream: a response, or the gateway's error.
struct WatchStreamMessage: Decodable, Sendable {
    var result: WatchResponse?
    var error: GatewayError?
}

/// The gateway's error body: a gRPC status code and message.
struct GatewayError: Decodable, Error, Sendable {
    var error: String?
    var message: String?
    var code: Int?

    var text: String { message ?? error ?? "unknown error" }
}
