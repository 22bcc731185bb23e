package gettext_test

import (
	"encoding/binary"
	"fmt"

	"examples/translation/gettext"
)

func ExampleParse() {
	mo := gettext.Encode("Content-Type: text/plain; charset=UTF-8\n", []gettext.Message{
		{ID: "%d file", IDPlural: "%d files", Str: []string{"%d个文件"}},
		{Context: "menu", ID: "Open", Str: []string{"打开"}},
	}, binary.BigEndian)
	c, err := gettext.Parse(mo)
	if err != nil {
		panic(err)
	}
	for _, m := range c.Messages {
		fmt.Printf("%q %q %q %q\n", m.Context, m.ID, m.IDPlural, m.Str)
	}
	// Output:
	// "" "%d file" "%d files" ["%d个文件"]
	// "menu" "Open" "" ["打开"]
}
