package sizes

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The median is of the window's sizes only, the lower middle of an even
// count, and the newest come back in order.
func TestRecentMedianOfItsWindow(t *testing.T) {
	r := MakeRecent(3)
	assert.Zero(t, r.Median(), "nothing known")
	r.Add(100)
	assert.EqualValues(t, 100, r.Median())
	r.Add(1)
	assert.EqualValues(t, 1, r.Median(), "the lower middle: a guess errs small")
	assert.EqualValues(t, 1, r.Newest(0))
	assert.EqualValues(t, 100, r.Newest(1))
	r.Add(50)
	r.Add(1000) // 100 leaves the window
	assert.Equal(t, 3, r.Len())
	assert.EqualValues(t, 50, r.Median())
	assert.Equal(t, []int64{1000, 50, 1}, []int64{r.Newest(0), r.Newest(1), r.Newest(2)})
}

// A Keyed holds at most its bound of keys, the first added going first,
// and a key's sizes stay its own.
func TestKeyedBounded(t *testing.T) {
	k := NewKeyed[string](2, 5)
	k.Add("a", 1)
	k.Add("b", 2)
	k.Add("a", 3)
	k.Add("c", 4) // a was added first: it goes
	assert.Nil(t, k.Get("a"))
	require.NotNil(t, k.Get("b"))
	assert.EqualValues(t, 2, k.Get("b").Median())
	assert.EqualValues(t, 4, k.Get("c").Median())
	for i := range 1000 {
		k.Add(fmt.Sprint(i), int64(i))
	}
	assert.Len(t, k.m, 2)
	assert.Len(t, k.order, 2)
}
