package conversations

import (
	"context"
	"errors"
	"time"
)

// Store is the row store of conversations the Service consumes, through
// the sealing layer (sealed.go): it keeps rows whose content is already
// sealed, each with its wrapped data key, and never sees a plaintext or a
// key-encryption key. A conversation's metadata is sealed under the
// conversation's data key, each item under a data key of its own, so
// deleting an item erases it as deleting the conversation erases all.
// OpenSQLiteStore and OpenPostgresStore implement it;
// conversationstest.Run is the conformance suite every implementation
// passes.
//
// A row and its data key are one: writes store both or neither, deletes
// delete both in one atomic step. Every method takes the owner: another
// owner's conversation is absent (ErrNotFound). Implementations are safe
// for concurrent use.
type Store interface {
	// Create stores conversation c and its first items.
	Create(ctx context.Context, c Row, items []ItemRow) error
	// Get returns owner's conversation id (metadata sealed, key
	// wrapped), or ErrNotFound.
	Get(ctx context.Context, owner, id string) (Row, error)
	// SetMetadata replaces the sealed metadata of owner's conversation
	// id, or returns ErrNotFound.
	SetMetadata(ctx context.Context, owner, id string, metadata []byte) error
	// Delete deletes owner's conversation id, its items and all their
	// data keys, or returns ErrNotFound. The implementation makes sure
	// the keys leave its storage (SQLite: its WAL).
	Delete(ctx context.Context, owner, id string) error
	// Append adds items after the conversation's last, in order:
	// ErrNotFound; ErrDuplicateItem when an item id is already in the
	// conversation (nothing is added); ErrTooManyItems when maxItems > 0
	// and the conversation would hold more than maxItems items.
	Append(ctx context.Context, owner, id string, items []ItemRow, maxItems int) error
	// List returns a page of the conversation's items in the order they
	// were added (Page.Desc: newest first), and whether more follow:
	// ErrNotFound; ErrItemNotFound when Page.After is not one of its items.
	List(ctx context.Context, owner, id string, p Page) ([]ItemRow, bool, error)
	// Item returns one item: ErrNotFound for the conversation,
	// ErrItemNotFound for the item.
	Item(ctx context.Context, owner, id, itemID string) (ItemRow, error)
	// DeleteItem deletes one item and its data key: ErrNotFound,
	// ErrItemNotFound.
	DeleteItem(ctx context.Context, owner, id, itemID string) error
	// All returns every item of the conversation, oldest first:
	// ErrNotFound; ErrTooLarge past lim, checked before the content is
	// read.
	All(ctx context.Context, owner, id string, lim Limits) ([]ItemRow, error)
	Close() error
}

// Row is a conversation as a Store keeps it: Metadata sealed under the
// conversation's data key, Key that key wrapped. Times are kept to the
// second.
type Row struct {
	ID, Owner string
	CreatedAt time.Time
	Metadata  []byte
	Key       []byte
}

// ItemRow is one item: Body (the item's JSON) sealed under its own data
// key, bound to ItemKeyID; Key that key wrapped.
type ItemRow struct {
	ID   string
	Body []byte
	Key  []byte
}

// ItemKeyID is the object id an item's data key is bound to.
func ItemKeyID(conversation, item string) string { return conversation + "/" + item }

// Page selects items of List: those after the item After ("": from the
// start), at most Limit.
type Page struct {
	After string
	Limit int
	Desc  bool
}

// Limits bound All.
type Limits struct {
	// MaxItems is the most items the conversation may hold.
	MaxItems int
	// MaxBytes bounds the items' plaintext together; 0: no bound.
	MaxBytes int64
	// Overhead is what sealing adds to an item's body.
	Overhead int64
}

// Errors of a Store. ErrNotFound is a conversation that is absent, deleted
// or another owner's: the store does not tell them apart.
var (
	ErrNotFound      = errors.New("conversations: not found")
	ErrItemNotFound  = errors.New("conversations: item not found")
	ErrDuplicateItem = errors.New("conversations: duplicate item id")
	ErrTooManyItems  = errors.New("conversations: too many items")
	ErrTooLarge      = errors.New("conversations: conversation too large")
)

func unix(sec int64) time.Time { return time.Unix(sec, 0) }
