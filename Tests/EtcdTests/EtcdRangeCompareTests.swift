// The compare a commit's read range becomes on etcd (EtcdBackend.prepare), checked against
// the real server: it holds while no key in the range was modified after a revision, and
// fails, naming the key through the failure branch's range read, once one was.
import Foundation
import Strata
@testable import StrataEtcd
import TestBackends
import Testing

@Suite(.hangLimit) struct EtcdRangeCompareTests {
    @Test func aRangeCompareFailsOnceAKeyInTheRangeIsModified() async throws {
        let client = try EtcdClient(endpoints: [try EtcdServer.shared.get().endpoint], options: EtcdServer.options)
        let prefix = Array("range-compare-\(UUID().uuidString)/".utf8)
        func put(_ key: String) async throws -> Int64 {
            let body = try client.encode(TxnRequest(compare: [], success: [RequestOp(request_put: PutRequest(key: EtcdBytes(prefix + Array(key.utf8)), value: EtcdBytes([1])))], failure: []))
            return try #require(try await client.txn(body).get().header?.revision?.value)
        }
        /// A transaction guarded by "no key in `from..<to` modified after `revision`", whose
        /// failure branch reads the range; whether it succeeded, and the keys read.
        func guarded(_ from: String, _ to: String, after revision: Int64) async throws -> (Bool, [String]) {
            let (lower, upper) = (EtcdBytes(prefix + Array(from.utf8)), EtcdBytes(prefix + Array(to.utf8)))
            let body = try client.encode(TxnRequest(compare: [Compare(key: lower, range_end: upper, result: .LESS, mod_revision: EtcdInt(revision + 1))],
                                                    success: [], failure: [RequestOp(request_range: RangeRequest(key: lower, range_end: upper, keys_only: true))]))
            let response = try await client.txn(body).get()
            let kvs = response.responses?.first?.response_range?.kvs ?? []
            let changed = kvs.filter { ($0.mod_revision?.value ?? 0) > revision }.map { String(decoding: $0.key.bytes.dropFirst(prefix.count), as: UTF8.self) }
            return (response.succeeded == true, changed)
        }
        let read = try await put("list/1")
        #expect(try await guarded("list/", "list0", after: read) == (true, []))
        _ = try await put("other")
        #expect(try await guarded("list/", "list0", after: read) == (true, []), "a key outside the range")
        _ = try await put("list/2")
        #expect(try await guarded("list/", "list0", after: read) == (false, ["list/2"]))
        #expect(try await guarded("list/3", "list/4", after: read) == (true, []), "an empty range holds")
    }
}
