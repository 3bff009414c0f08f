// Every error Strata throws reads as a sentence through Foundation's `LocalizedError`
// too (`error.localizedDescription`, SwiftUI alerts, logs), not only through
// `description`: the same text, which says what happened and what to do.
import Foundation

extension UnitOfWorkError: LocalizedError {
    public var errorDescription: String? { description }
}

extension CommitFailure: LocalizedError {
    public var errorDescription: String? { description }
}

extension ContextError: LocalizedError {
    public var errorDescription: String? { description }
}

extension ChangeFeedError: LocalizedError {
    public var errorDescription: String? { description }
}
