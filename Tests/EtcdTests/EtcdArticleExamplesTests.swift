import Strata
import StrataEtcd
import Foundation

// The examples of the DocC article EtcdBackend.md (Sources/Strata/Strata.docc), type-checked:
// they need an etcd at the addresses they name, so the function holding them is never
// called. The article's imports are this file's; its `Order` is `ArticleEtcdOrder`. What
// the article says of a store over etcd is tested on a real etcd by EtcdStoreTests and the
// shared suites (BackendSuiteTests).

/// The article's `Order`.
struct ArticleEtcdOrder: Record {
    var id: Int
    var quantity: Int
}

/// EtcdBackend.md's two code blocks, as written. Never called.
private func etcdArticleExample() async throws {
    var options = EtcdOptions()
    options.maxTxnOps = 1024                                   // the server's --max-txn-ops
    let store = try await Store.open(etcd: ["http://10.0.0.5:2379", "http://10.0.0.6:2379"],
                                     prefix: "shop/", options: options)

    try await store.write(retries: 5) { unit in
        try unit.repository(ArticleEtcdOrder.self).insert(ArticleEtcdOrder(id: 42, quantity: 1))
    }

    func place(_ order: ArticleEtcdOrder, in store: Store) async throws {
        while true {
            do {
                try await store.write(retries: 5) { unit in
                    let orders = unit.repository(ArticleEtcdOrder.self)
                    if try orders.get(order.id) == nil { try orders.insert(order) }
                }
                return
            } catch UnitOfWorkError.commitFailed(.outcomeUnknown) {
                continue                                       // applied or not: run it again
            }
        }
    }

    try await place(ArticleEtcdOrder(id: 43, quantity: 2), in: store)
}
