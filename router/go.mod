module slacker/router

go 1.19
