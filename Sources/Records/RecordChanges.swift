// The typed change feed: one entity's record-level changes, read from the store's change
// feed (ChangeFeed.swift), so it has the same order, history and bound.
//
// Invariants:
//  RecordChanges.T1. A commit's changes to the entity arrive together, in id order, after those of
//      every earlier commit; a commit that did not touch the entity yields nothing.
//  RecordChanges.T2. `inserted` means the store did not hold the record before the commit, `updated`
//      that it did, `deleted` that it did and the commit removed it. A record inserted
//      and deleted inside one unit of work never reaches the log (Context.rootBatch), so
//      it yields nothing. Batches a root commit wrote with log format 1 carry no inserts:
//      their puts read as `updated`.
import StrataContexts
import StrataEngine

/// One record's change in one commit, from `Store.changes(of:since:)`.
public struct RecordChange<R: Record>: Sendable {
    /// What the commit did to the record (RecordChanges.T2).
    public enum Kind: Sendable, Hashable {
        case inserted
        case updated
        case deleted
    }

    public let kind: Kind
    public let id: R.ID
    /// The version of the commit that made the change.
    public let version: UInt64
    /// Whether this is the commit's last change to the entity (RecordChanges.T1): once it is handled,
    /// `version` is where a consumer resumes from (`changes(of:since: version)`).
    public internal(set) var isLastOfCommit: Bool
    /// The record's stored bytes after the change; nil when it was deleted.
    let bytes: [UInt8]?

    /// The record as the commit left it, decoded now; nil when it was deleted. Throws
    /// `RecordError.decoding` when the stored bytes are not an `R` (a record written in an
    /// older shape).
    public func record() throws -> R? {
        guard let bytes else { return nil }
        do {
            return try RecordDecoder().decode(R.self, from: bytes, reading: RecordDecoder.reading(R.self))
        } catch let error as RecordError {
            throw error
        } catch {
            throw RecordError.decoding(entity: RecordTypeCache.entityName(of: R.self),
                                       key: renderKey(RecordKeys.key(entity: RecordTypeCache.entityName(of: R.self), id: id)),
                                       reason: "\(error)")
        }
    }
}

extension RecordChange: CustomStringConvertible {
    public var description: String { "\(kind) \(RecordTypeCache.entityName(of: R.self)) \(id) at version \(version)" }
}

/// The record-level changes of one entity, in commit order (RecordChanges.T1), until the store closes
/// or the task stops iterating. Made by `Store.changes(of:since:bufferLimit:)`.
public struct RecordChangeFeed<R: Record>: AsyncSequence, Sendable {
    public typealias Element = RecordChange<R>
    public typealias Failure = any Error

    let feed: ChangeFeed
    let prefix: [UInt8]

    public func makeAsyncIterator() -> Iterator { Iterator(base: feed.makeAsyncIterator(), prefix: prefix) }

    /// Hands out one commit's changes at a time, read from the store's feed.
    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<ChangeSet, any Error>.Iterator
        let prefix: [UInt8]
        var pending: [RecordChange<R>] = []
        var position = 0

        public mutating func next() async throws -> RecordChange<R>? {
            try await next(isolation: nil)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async throws(any Error) -> RecordChange<R>? {
            while position == pending.count {
                guard let changeSet = try await base.next(isolation: actor) else { return nil }
                pending = try RecordChangeFeed.changes(in: changeSet, prefix: prefix)
                position = 0
            }
            defer { position += 1 }
            return pending[position]
        }
    }

    /// The entity's changes in `changeSet` (already in key order, so in id order).
    static func changes(in changeSet: ChangeSet, prefix: [UInt8]) throws -> [RecordChange<R>] {
        var changes: [RecordChange<R>] = []
        for change in changeSet.changes where change.key.starts(with: prefix) {
            guard let id = R.ID(keyBytes: Array(change.key[prefix.count...])) else {
                throw RecordError.decoding(entity: RecordTypeCache.entityName(of: R.self), key: renderKey(change.key),
                                           reason: "its id bytes are not a \(R.ID.self)")
            }
            let kind: RecordChange<R>.Kind = change.value == nil ? .deleted : change.isInsert ? .inserted : .updated
            changes.append(RecordChange(kind: kind, id: id, version: changeSet.version, isLastOfCommit: false, bytes: change.value))
        }
        if !changes.isEmpty { changes[changes.count - 1].isLastOfCommit = true }
        return changes
    }
}

extension Store {
    /// The changes to `type`'s records made by commits after version `since` (nil: from now
    /// on), in commit order (RecordChanges.T1, RecordChanges.T2). A commit's changes carry its version and arrive
    /// together, the last marked `isLastOfCommit`: to resume after a restart, pass the
    /// version of the last such change you handled. History comes from the write-ahead log
    /// and the history kept beside it across checkpoints and restarts (`WALOptions.history`):
    /// throws `EngineError.historyUnavailable` when neither holds version `since + 1` any
    /// more. `bufferLimit` counts commits (of any entity) the consumer has
    /// not taken; past it the feed ends with `ChangeFeedError.fellBehind`.
    public func changes<R: Record>(of type: R.Type, since version: UInt64? = nil,
                                   bufferLimit: Int = 10_000) throws -> RecordChangeFeed<R> {
        RecordChangeFeed(feed: try changes(after: version, bufferLimit: bufferLimit),
                         prefix: RecordKeys.prefix(entity: RecordTypeCache.entityName(of: type)))
    }
}
