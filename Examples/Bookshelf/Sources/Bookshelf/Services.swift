// Application services: each use case is one unit of work. Everything it changes is
// committed together or not at all; follow-up work (publishing a domain event) runs only
// after the durable commit.
import Strata
import Foundation

/// Why a use case refused.
public enum BookshelfError: Error, Equatable {
    case noSuchFile(UUID)
    case noSuchFolder(UUID)
    case nobodyIsHungry
    case noBananas
}

/// Removes files.
public struct RemoveFiles {
    public let store: Store

    public init(store: Store) { self.store = store }

    /// Removes every file in `ids` as one transaction: if any of them is missing,
    /// none is removed. Returns the bytes freed.
    @discardableResult
    public func callAsFunction(_ ids: [UUID]) throws -> Int {
        try store.write { unit in
            let files = unit.repository(BookFile.self)
            var freed = 0
            for id in ids {
                guard let file = try files.get(id) else { throw BookshelfError.noSuchFile(id) }
                freed += file.byteCount
                try files.delete(id)
            }
            return freed
        }
    }
}

/// Removes a folder and everything in it: its files go by the folder's delete rule
/// (`Folder.files`, `.cascade`), in the same commit.
public struct RemoveFolder {
    public let store: Store

    public init(store: Store) { self.store = store }

    /// Removes the folder with `id` and its files; returns the bytes freed.
    @discardableResult
    public func callAsFunction(_ id: Folder.ID) throws -> Int {
        try store.write { unit in
            guard let folder = try unit.repository(Folder.self).get(id) else { throw BookshelfError.noSuchFolder(id) }
            let freed = try folder.files(in: unit).reduce(0) { $0 + $1.byteCount }
            try unit.repository(Folder.self).delete(id)
            return freed
        }
    }
}

/// A domain event, published after the commit that caused it.
public struct ChildWasFed: Equatable, Sendable {
    public let child: String
    public let grams: Int
    public let version: UInt64

    public init(child: String, grams: Int, version: UInt64) {
        self.child = child
        self.grams = grams
        self.version = version
    }
}

/// Feeds the hungriest child the biggest banana.
public struct FeedHungriestChild {
    public let store: Store
    public let publish: (ChildWasFed) -> Void

    public init(store: Store, publish: @escaping (ChildWasFed) -> Void) {
        self.store = store
        self.publish = publish
    }

    public func callAsFunction() throws {
        try store.write(retries: 3) { unit in
            let children = unit.repository(Child.self)
            let bananas = unit.repository(Banana.self)
            guard let child = try children.first(#Predicate<Child> { $0.hunger > 0 },
                                                 sortBy: [SortDescriptor(\Child.hunger, order: .reverse)]) else {
                throw BookshelfError.nobodyIsHungry
            }
            guard let banana = try bananas.first(sortBy: [SortDescriptor(\Banana.grams, order: .reverse)]) else {
                throw BookshelfError.noBananas
            }
            try bananas.delete(banana.id)
            var fed = child
            fed.hunger = max(0, child.hunger - banana.grams / 10)
            try children.update(fed)
            // The event goes out only once the change is durable.
            unit.afterCommit { receipt in
                publish(ChildWasFed(child: child.id, grams: banana.grams, version: receipt.version))
            }
        }
    }
}

/// Editing a book in a form: changes live in a child context until saved; cancelling
/// throws them away.
public final class EditBookForm {
    private let root: Context
    private let draft: Context
    public let bookID: Int

    public init(store: Store, bookID: Int) throws {
        root = store.makeContext()
        draft = try root.makeChild()
        self.bookID = bookID
    }

    /// The book as the form shows it.
    public var book: Book? {
        get throws { try draft.repository(Book.self).get(bookID) }
    }

    public func setTitle(_ title: String) throws {
        guard var book = try book else { throw RecordError.notFound(entity: Book.entityName, id: "\(bookID)") }
        book.title = title
        try draft.repository(Book.self).update(book)
    }

    /// Merges the form into its context and commits that durably.
    public func save() throws {
        try draft.commit()
        try root.commit()
    }

    /// Drops the form's changes.
    public func cancel() {
        draft.discard()
        root.discard()
    }
}
